"""The site's search (Pagefind over the built pages) as a reader uses it, in Chromium.

On the home page the test types each query into furo's search box, as a reader would, and reads
the results as they appear under it: the API names of ``QUERIES`` and the symptoms and questions
of ``QUESTIONS`` (tests/_browser.py) must each put a tip that answers them among the first three.
The rank of the answering tip, the top results, the time from the keypress to the results and
the bytes the browser fetched are written to ``test-artifacts/search-report.json`` and
``search-report.md``. Times are reported, never asserted beyond the test's timeout: a loaded
machine must not fail a test by being slow.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conf import settings
from tipsite import records
from tipsite.sphinxext import pagefind, search, view

pytest.register_assert_rewrite("_browser")
from _browser import (  # noqa: E402
    ARTIFACTS,
    QUERIES,
    QUESTIONS,
    SEARCH_PANEL,
    TIMEOUT_MS,
    answering_docnames,
    docname_of,
    screenshot,
    top_results,
    wait_for_search,
)

pytest_plugins = ["_browser"]  # html_dir, base_url, browser, new_page

ALL_QUERIES = {**QUERIES, **QUESTIONS}
RANKED = 10  # results whose pages the report names


class _SearchData(HTMLParser):
    """The Pagefind attributes of a built page: filters, metadata, and what is ignored."""

    def __init__(self):
        super().__init__()
        self.filters: dict[str, list[str]] = {}
        self.meta: dict[str, str] = {}
        self._capture: list[tuple[str, int]] = []
        self._depth = 0
        self._text: dict[str, list[str]] = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self._depth += 1
        if "data-pagefind-filter" in attrs:
            key, _, value = attrs["data-pagefind-filter"].partition(":")
            self.filters.setdefault(key, []).append(value)
        meta = attrs.get("data-pagefind-meta")
        if meta:
            key, sep, value = meta.partition(":")
            if sep:
                self.meta[key] = value
            else:
                self._capture.append((key, self._depth))
                self._text[key] = []

    def handle_endtag(self, tag):
        if self._capture and self._capture[-1][1] == self._depth:
            key, _ = self._capture.pop()
            self.meta[key] = " ".join("".join(self._text.pop(key)).split())
        self._depth -= 1

    def handle_data(self, data):
        for key, _ in self._capture:
            self._text[key].append(data)


def search_data(path: Path) -> _SearchData:
    parser = _SearchData()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def test_tip_pages_carry_their_filters_and_search_words(html_dir, tips):
    """Each tip page names its verdicts, devices and tags as Pagefind filters, and its claim,
    takeaway and search words as metadata; no Sphinx index entries are left."""
    for tip in tips:
        page = html_dir / f"{tip.docname}.html"
        data = search_data(page)
        record = records.read_record(settings.TIPS_OUT_DIR / tip.topic / tip.path.name)
        assert record is not None, tip.name
        # one filter per device (named by the device: "cpu", "cuda"), its value that device's own
        # state (issue 34: a verdict filter across devices matched CUDA on the CPU's verdict);
        # tags as tags ("cuda"): a device and a tag never share a filter
        assert sorted(data.filters.get("tag", [])) == sorted(tip.tags), tip.name
        assert "verdict" not in data.filters and "device" not in data.filters, tip.name
        states = {f"{v}, {view.STATE_WORDS['stale']}" for v in records.verdicts()}
        states |= {*records.verdicts(), *(view.STATE_WORDS[k] for k in ("not measured", "not applicable"))}
        for device in records.devices():
            (value,) = data.filters.get(device, [None])
            assert value in states, (tip.name, device, value)
            assert (value == view.STATE_WORDS["not applicable"]) == (device not in tip.devices), (tip.name, device)
            # the result's badge: the state's token and its words
            token, label = data.meta.get(f"verdict_{device}"), data.meta.get(f"state_{device}")
            assert token in {*records.verdicts(), *view.STATE_TOKENS.values()} - {"measured"}, (tip.name, token)
            assert (label == token or label.startswith(f"{value} (") or label == value
                    or (value == view.STATE_WORDS["not measured"] and label == view.BUSY_WORDS)), (
                tip.name, device, token, label)
        for device, decision in (record.get("verdicts") or {}).items():
            if device in tip.devices and decision["verdict"] != "busy":
                assert data.meta.get(f"verdict_{device}") == decision["verdict"], (tip.name, device)
                assert data.filters[device] == [decision["verdict"]], (tip.name, device)
        assert data.meta.get("claim"), f"{tip.name}: no claim for the result's snippet"
        assert " ".join(tip.takeaway.split()) == data.meta.get("takeaway"), tip.name
        # the search words as metadata, word for word: "_", "." and marks such as "=" part words
        # there (a compound word counts once; "bias=False" is the words "bias false")
        def words(text: str) -> str:
            return " " + " ".join(re.findall(r"[^\W_]+", text.lower())) + " "

        keywords = words(data.meta.get("keywords", ""))
        for word in search.search_keywords(tip):
            assert words(word).strip() and words(word) in keywords, f"{tip.name}: search word {word!r} missing"
        html = page.read_text(encoding="utf-8")
        assert 'id="index-0"' not in html, f"{tip.name}: Sphinx index entries are back"


def test_readers_words_reach_the_tips_that_name_them(tips):
    by_name = {t.name: t for t in tips}
    oom = [t for t in tips if "out of memory" in " ".join(t.keywords).lower()]
    assert oom, "no tip names 'out of memory'"
    for tip in oom:
        assert "OOM" in search.search_keywords(tip), tip.name
    if "tip_cudnn_benchmark" in by_name:
        assert "reproducible" in search.search_keywords(by_name["tip_cudnn_benchmark"])


def test_the_index_covers_the_listed_pages(html_dir):
    bundle = html_dir / pagefind.BUNDLE
    entry = json.loads((bundle / "pagefind-entry.json").read_text(encoding="utf-8"))
    pages = pagefind.pages_to_index(html_dir)
    indexed = sum(lang["page_count"] for lang in entry["languages"].values())
    assert indexed == len(pages), f"Pagefind indexed {indexed} pages, conf/search.toml lists {len(pages)}"
    sizes = pagefind.bundle_sizes(bundle)
    assert sizes["index"] > 0 and sizes["engine"] > 0 and sizes["ui"] > 0, sizes


def test_a_build_without_the_pagefind_binary_stops_saying_how_to_install_it(monkeypatch):
    from sphinx.errors import ExtensionError

    monkeypatch.setitem(sys.modules, "pagefind_bin", None)  # import pagefind_bin -> ImportError
    with pytest.raises(ExtensionError, match=r"pip install -r conf/requirements/docs\.txt"):
        pagefind.executable()


def test_every_build_writes_the_index_of_its_tip_pages(tiny_build, good_tip):
    result = tiny_build({"correctness/tip_tiny.py": good_tip})
    assert result.returncode == 0, result.output
    entry = json.loads((result.html / pagefind.BUNDLE / "pagefind-entry.json").read_text(encoding="utf-8"))
    assert sum(lang["page_count"] for lang in entry["languages"].values()) == 1
    page = result.page("correctness", "tip_tiny")
    assert 'data-pagefind-filter="tag:' in page and 'data-pagefind-meta="keywords"' in page


def _rank_page(page, base_url: str, query: str, box) -> dict:
    """Type ``query`` into the box; the ranked results and how long they took to show."""
    box.fill(query)
    shown_at = wait_for_search(page, query)
    typed_at = page.evaluate("() => window.__tipsTyped")
    info = page.evaluate("""async (n) => {
        const p = document.querySelector('#tips-search-panel');
        const inst = window.PagefindComponents.getInstanceManager().getInstance('default');
        const data = await Promise.all(inst.searchResult.results.slice(0, n).map(r => r.data()));
        const items = Array.from(p.querySelectorAll('ul.pf-results > li.tips-result')).slice(0, 3);
        return {term: p.dataset.term, count: Number(p.dataset.count),
                urls: data.map(d => d.url),
                snippets: items.map(li => li.innerText)}; }""", RANKED)
    info["ms"] = round(shown_at - typed_at)
    info["ranked"] = [docname_of(base_url + u, base_url) for u in info.pop("urls")]
    info["top"] = top_results(page, base_url)
    return info


def _first_rank(ranked: list[str], expected: set[str]) -> int | None:
    return next((i + 1 for i, doc in enumerate(ranked) if doc in expected), None)


def test_queries_and_questions_rank_their_tip_in_the_first_three(new_page, base_url, html_dir, tips):
    page = new_page()
    fetched: list[tuple[str, int]] = []

    def count(response):
        if "/_static/pagefind/" in response.url and response.ok:
            try:
                fetched.append((response.url, len(response.body())))
            except Exception:  # a redirect or a response without a body
                pass

    page.on("response", count)
    page.goto(f"{base_url}/index.html")
    box = page.locator("input.sidebar-search")
    # the page's clock when the reader first pressed a key, and when the box last changed
    page.evaluate("""() => {
        document.addEventListener('keydown', () => { window.__tipsFirstKey ??= performance.now(); }, true);
        document.addEventListener('input', () => { window.__tipsTyped = performance.now(); }, true); }""")

    # Cold: nothing of the search is loaded; the reader clicks the box and types a word.
    box.click()
    page.keyboard.type("leak")
    cold = wait_for_search(page, "leak")
    first_key = page.evaluate("() => window.__tipsFirstKey")
    cold_bytes = sum(n for _, n in fetched)

    rows, failures = [], []
    for query, answers in ALL_QUERIES.items():
        expected = answering_docnames(query, tips)
        info = _rank_page(page, base_url, query, box)
        rank = _first_rank(info["ranked"], expected)
        row = {"query": query, "kind": "api" if query in QUERIES else "question",
               "answers": sorted(expected), "rank": rank, "searched": info["term"],
               "results": info["count"], "top": info["ranked"][:3], "ms": info["ms"]}
        rows.append(row)
        if not expected:
            failures.append(f"{query!r}: no tip answers {answers} yet")
        elif rank is None or rank > 3:
            failures.append(f"{query!r}: rank {rank}, top three {info['ranked'][:3]}, want one of {sorted(expected)}")
        if info["top"] != info["ranked"][:len(info["top"])]:
            failures.append(f"{query!r}: the page shows {info['top']}, the ranking is {info['ranked'][:3]}")
        if len(set(info["ranked"])) != len(info["ranked"]):
            failures.append(f"{query!r}: a page appears twice: {info['ranked']}")
        for snippet in info["snippets"]:
            if "Go to the end" in snippet or not snippet.strip():
                failures.append(f"{query!r}: a result's snippet is {snippet[:80]!r}")
        if query == "why is my DataLoader so slow?":
            screenshot(page, "search-popup.png", full_page=False)

    sizes = pagefind.bundle_sizes(html_dir / pagefind.BUNDLE)
    warm = [r["ms"] for r in rows]
    report = {
        "queries": rows,
        "keypress_to_results_ms": {
            "cold_first_query": round(cold - first_key) if first_key else None,
            "warm_median": statistics.median(warm), "warm_max": max(warm),
            "note": "cold: from the first keypress on a freshly loaded home page (the UI and index "
                    "load on focus) to the first results; warm: from typing a query into the box "
                    "(one input event) to its first three results shown, debounce included",
        },
        "bundle_bytes_on_disk": sizes,
        "fetched_bytes": {"cold_first_query": cold_bytes, "all_queries": sum(n for _, n in fetched),
                          "files": len({u for u, _ in fetched})},
    }
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "search-report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (ARTIFACTS / "search-report.md").write_text(_markdown(report), encoding="utf-8")
    assert not failures, "\n".join(failures)
    assert not page.js_errors, page.js_errors


def _markdown(report: dict) -> str:
    t = report["keypress_to_results_ms"]
    s, f = report["bundle_bytes_on_disk"], report["fetched_bytes"]
    lines = ["# Search: ranks of the answering tip", "",
             "| query | kind | rank | searched as | results | top three | ms |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in report["queries"]:
        top = ", ".join(d.rsplit("/", 1)[-1] for d in r["top"])
        lines.append(f"| {r['query']} | {r['kind']} | {r['rank']} | {r['searched']} | {r['results']} "
                     f"| {top} | {r['ms']} |")
    lines += ["", f"Keypress to results on the home page: cold {t['cold_first_query']} ms, "
                  f"warm median {t['warm_median']} ms, max {t['warm_max']} ms ({t['note']}).", "",
              f"Bundle on disk: index {s['index']} B, engine {s['engine']} B, UI {s['ui']} B. "
              f"Fetched by the browser: {f['cold_first_query']} B for the first query, "
              f"{f['all_queries']} B for all {len(report['queries'])} queries ({f['files']} files).", ""]
    return "\n".join(lines)


def test_filters_narrow_the_results_by_verdict_device_and_tag(new_page, base_url, tips):
    page = new_page()
    page.goto(f"{base_url}/index.html")
    box = page.locator("input.sidebar-search")
    box.fill("memory")
    wait_for_search(page, "memory")
    panel = page.locator(SEARCH_PANEL)
    before = int(panel.get_attribute("data-count"))
    assert before >= 2
    facets = [*records.devices(), "tag"]  # one filter per device, its own state there; the tags
    for facet in facets:
        dropdown = panel.locator(f'pagefind-filter-dropdown[filter="{facet}"]')
        assert dropdown.locator("button.pf-dropdown-trigger").is_visible(), facet
    # choose one CPU state: the list keeps the tips in that state on the CPU, and only them
    dropdown = panel.locator('pagefind-filter-dropdown[filter="cpu"]')
    dropdown.locator("button.pf-dropdown-trigger").click()
    option = dropdown.locator('[role="option"]').first
    option.wait_for()
    value = option.locator(".pf-dropdown-option-label").inner_text().strip()
    option.click()
    page.wait_for_function(
        """([sel, v]) => (document.querySelector(sel).dataset.filters || '').includes(v)""",
        arg=[SEARCH_PANEL, value])
    wait_for_search(page, "memory")
    after = int(panel.get_attribute("data-count"))
    assert 0 < after <= before
    shown = panel.locator("li.tips-result")
    for item in shown.all():  # the CPU badge says that state: "holds, older tip version (date)"
        cpu = item.locator(".tips-result-device", has_text=records.device_word("cpu")).first
        badge = cpu.locator(".tip-verdict").inner_text().strip()
        assert badge == value or badge.startswith(f"{value} ("), (value, badge)
    screenshot(page, "search-filtered.png", full_page=False)
    assert not page.js_errors, page.js_errors


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_search_at_phone_width(new_page, base_url, dark):
    page = new_page(width=390, height=844, dark=dark)
    page.goto(f"{base_url}/index.html")
    # furo keeps the search box in the navigation drawer on a phone
    page.locator("label.nav-overlay-icon").click()
    box = page.locator("input.sidebar-search")
    box.fill("OOM")
    wait_for_search(page, "OOM")
    panel = page.locator(SEARCH_PANEL)
    box_ = panel.bounding_box()
    assert box_["x"] >= 0 and box_["x"] + box_["width"] <= 390 + 1, box_
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"the search makes the page {overflow}px wider than the phone"
    colours = page.evaluate("""sel => {
        const l = c => { const v = c.match(/\\d+/g).map(Number);
                         return (0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]) / 255; };
        const p = document.querySelector(sel);
        return [l(getComputedStyle(p).backgroundColor),
                l(getComputedStyle(p.querySelector('.tips-result-title')).color)]; }""", SEARCH_PANEL)
    if dark:
        assert colours[0] < 0.3 < colours[1], f"search results not in dark colours: {colours}"
    else:
        assert colours[1] < 0.6 < colours[0], f"search results not in light colours: {colours}"
    screenshot(page, f"search-phone-{'dark' if dark else 'light'}.png", full_page=False)
    assert not page.js_errors, page.js_errors


def test_search_page_shows_pagefind_results_for_the_query(new_page, base_url, tips):
    page = new_page()
    page.goto(f"{base_url}/search.html?q=OOM")
    wait_for_search(page, "OOM")
    assert page.locator("#search-results").is_hidden(), "Sphinx's own results are shown as well"
    expected = answering_docnames("OOM", tips)
    assert expected & set(top_results(page, base_url))
    assert page.locator("input.tips-search-page-input").input_value() == "OOM"
    assert not page.js_errors, page.js_errors


def test_a_page_opened_from_disk_falls_back_to_sphinx_search(new_page, html_dir):
    """Browsers refuse to fetch an index from file://: there the box opens Sphinx's search page."""
    page = new_page()
    page.goto((html_dir / "search.html").as_uri() + "?q=from_numpy")
    page.wait_for_function(
        "() => { const s = document.querySelector('#search-results .search-summary');"
        " return s && s.textContent.trim().length > 0; }", timeout=TIMEOUT_MS)
    assert page.locator("#search-results").is_visible()
    assert page.locator(SEARCH_PANEL).count() == 0
    assert re.search(r"tip_from_numpy", page.locator("#search-results").inner_html())


# --- issue 34: a pasted error line finds the tip that explains it; never "No results" alone ------------
# A tiny site (tests/tinysite) whose tips declare the lines real tips declare (the gallery's
# sphinx_gallery_tips_errors), among decoys sharing their common words; the lines pasted are
# torch's own (tests/test_reader.py PASTED: from readers' logs and torch's source).

def _tiny_tip(title: str, keywords: list[str], errors: tuple[str, ...] = ()) -> str:
    from conftest import GOOD_BODY, make_tip

    meta = f"# sphinx_gallery_tips_keywords = {json.dumps(keywords)}"
    if errors:
        meta += f"\n# sphinx_gallery_tips_errors = {json.dumps(list(errors))}"
    return make_tip(GOOD_BODY, title=title, extra_meta=meta)


@pytest.fixture(scope="module")
def pasted_site(tmp_path_factory):
    """The tiny site built once, served on 127.0.0.1: ``(base_url, {name: docname})``."""
    import functools
    import threading
    from http.server import ThreadingHTTPServer

    from _browser import _QuietHandler
    from conftest import TinySite

    from tipsite import tipmeta

    real = {t.name: t for t in tipmeta.read_all()}
    tips = {
        "model_design/tip_device_mismatch": _tiny_tip(
            "Create tensors on the input's device", ["new_zeros", "device"],
            real["tip_tensors_in_forward"].errors),
        "memory/tip_oom": _tiny_tip("Retrying after out of memory", ["OutOfMemoryError", "batch size"],
                                    real["tip_oom_retry"].errors),
        "memory/tip_fragmentation": _tiny_tip("Expandable segments", ["PYTORCH_CUDA_ALLOC_CONF"],
                                              real["tip_expandable_segments"].errors),
        "distributed/tip_dataparallel": _tiny_tip(
            "DataParallel against DistributedDataParallel", ["DataParallel", "DDP"],
            real["tip_ddp_vs_dataparallel"].errors),
        "saving_loading/tip_load": _tiny_tip("Loading a GPU checkpoint on a CPU", ["map_location"],
                                             real["tip_map_location"].errors),
        "speed/tip_pin": _tiny_tip("Pinned memory copies to the GPU", ["pin_memory", "cuda", "tensors",
                                                                      "device", "memory", "allocate"]),
        # "still" and "ok" are words of the index, on another page than DataParallel: Pagefind
        # leaves out a word no page has, so a query finds nothing only where its words are apart
        "correctness/tip_seed": _tiny_tip("Seed every device", ["cuda", "device", "cpu", "memory",
                                                                "expected", "same", "still ok"]),
    }
    site = TinySite(tmp_path_factory.mktemp("pasted"))
    site.write({f"{k}.py": v for k, v in tips.items()})
    result = site.build()
    assert result.returncode == 0, result.output[-3000:]
    handler = functools.partial(_QuietHandler, directory=str(site.html))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", {k.rsplit("/", 1)[1]: f"tips/{k}" for k in tips}
    server.shutdown()
    server.server_close()


def _ask(page, base_url: str, text: str) -> list[str]:
    box = page.locator("input.sidebar-search")
    box.fill(text)
    wait_for_search(page, text)
    return top_results(page, base_url)


PASTED_LINES = {
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
    "cuda:1 and cuda:0!": {"tip_device_mismatch"},
    "RuntimeError: Expected all tensors to be on the same device, but got mat1 is on cpu, different "
    "from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)": {"tip_device_mismatch"},
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity "
    "of 47.53 GiB of which 16.88 MiB is free. Process 3652628 has 47.51 GiB memory in use. Of the "
    "allocated memory 47.14 GiB is allocated by PyTorch, and 57.79 MiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
    "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)":
        {"tip_oom", "tip_fragmentation"},
    "RuntimeError: CUDA error: out of memory": {"tip_oom"},
    "RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is "
    "False. If you are running on a CPU-only machine, please use torch.load with "
    "map_location=torch.device('cpu') to map your storages to the CPU.": {"tip_load"},
}


def test_a_pasted_error_line_finds_the_tip_that_explains_it(new_page, pasted_site):
    base_url, docnames = pasted_site
    page = new_page()
    page.goto(f"{base_url}/index.html")
    # the browser keeps the words the build indexed (search.pasted_words)
    for line in PASTED_LINES:
        assert page.evaluate("t => window.TipsSearchQuery.pastedTerms(t)", line) == search.pasted_words(line)
    for line, wanted in PASTED_LINES.items():
        top = _ask(page, base_url, line)
        assert {docnames[n] for n in wanted} & set(top), (line, top)
        exact = page.locator(SEARCH_PANEL).get_attribute("data-nearest") in ("", None)
        print(f"{'all words' if exact else 'nearest'}: {line[:60]!r} -> {top}")
    screenshot(page, "search-pasted.png", full_page=False)
    assert not page.js_errors, page.js_errors


def test_a_query_no_page_holds_offers_the_nearest_tips(new_page, pasted_site):
    base_url, docnames = pasted_site
    page = new_page()
    page.goto(f"{base_url}/index.html")
    top = _ask(page, base_url, "is DataParallel still ok")
    panel = page.locator(SEARCH_PANEL)
    assert docnames["tip_dataparallel"] in top, top
    assert panel.get_attribute("data-nearest").lower() == "dataparallel"
    note = panel.locator(".tips-search-note")
    assert note.is_visible() and "nearest tips" in note.inner_text(), note.inner_text()
    screenshot(page, "search-nearest.png", full_page=False)
    # nothing at all: the note says so and where to browse, instead of "No results" alone
    page.locator("input.sidebar-search").fill("zxqvw frobnicate")
    page.wait_for_function("() => (document.querySelector('.tips-search-note') || {}).textContent"
                           "?.includes('No tip matches')")
    assert note.locator("a").get_attribute("href").endswith("generated/tags/index.html")
    assert not page.js_errors, page.js_errors

"""The built site in a real browser (Debian's Chromium, headless, through playwright).

A reader's paths through the site: type a query in the search box and find the tip that answers
it among the first three results; open a tip and see its verdict and where its numbers come
from; download its script and notebook; filter the home page's cards; read it on a phone in
dark mode. Screenshots land in test-artifacts/ (git-ignored). A browser that cannot start fails
these tests (see tests/_browser.py); they never skip.
"""

from __future__ import annotations

import json
import re
from urllib.parse import urljoin

import pytest

from conf import settings
from tipsite import records, tipmeta

pytest.register_assert_rewrite("_browser")
from _browser import (  # noqa: E402
    AXE_VERSION,
    QUERIES,
    answering_docnames,
    axe_violations,
    describe_violations,
    docname_of,
    screenshot,
    top_results,
    wait_for_search,
)

# The fixtures (html_dir, base_url, browser, new_page), registered once for every module.
pytest_plugins = ["_browser"]


def _example_tip(tips: list[tipmeta.Tip]) -> tipmeta.Tip:
    """The exemplar tip when it exists, else the first tip that examines a claim."""
    by_name = {t.name: t for t in tips}
    return by_name.get("tip_inference_mode") or next(t for t in tips if t.claims)


@pytest.mark.parametrize("query", list(QUERIES))
def test_search_box_finds_the_answering_tip(new_page, base_url, tips, query):
    expected = answering_docnames(query, tips)
    assert expected, f"no tip examines {QUERIES[query]} yet, so nothing can answer {query!r}"
    page = new_page()
    page.goto(f"{base_url}/index.html")
    box = page.locator("input.sidebar-search")
    box.fill(query)
    box.press("Enter")
    page.wait_for_url(re.compile(r"/search\.html\?"))
    wait_for_search(page)
    top = top_results(page, base_url)
    if query == "GradScaler":
        screenshot(page, "search-results.png")
    assert expected & set(top), (
        f"search {query!r}: first three results are {top}, none of {sorted(expected)}")
    assert not page.js_errors, page.js_errors


def test_tip_page_shows_verdict_provenance_source_and_tools(new_page, base_url, tips):
    tip = _example_tip(tips)
    record = records.read_record(settings.TIPS_OUT_DIR / tip.topic / tip.path.name)
    page = new_page()
    page.goto(f"{base_url}/{tip.docname}.html")

    badge = page.locator(".tip-header .tip-verdict").first
    assert badge.is_visible()
    first_decided = next(iter(record["verdicts"].values()))
    assert badge.inner_text().strip() == first_decided["verdict"]
    provenance = page.locator(".tip-provenance")
    assert provenance.is_visible()
    assert re.search(r"torch \d+\.\d+.*build threads \d+.*\d{4}-\d\d-\d\d", provenance.inner_text())

    # the source article and the claim ids, linked to the claim's anchor on the claims page
    header = page.locator(".tip-header")
    for cid in tip.claims:
        link = header.locator(f'a[href*="claims.html#claim-{cid.lower()}"]')
        assert link.count() and link.first.is_visible(), f"no visible link to claim {cid}"
        source = tipmeta.sources()[cid.split("-")[0]]["title"]
        assert source in header.inner_text()
    # tags link to their tag page; related tips link to tip pages
    tag_links = header.locator("a.tip-tag-link")
    assert tag_links.count() == len(tip.tags)
    assert "Related tips" in header.inner_text()
    related = header.locator("a[href*='tip_']")
    assert related.count() >= 1

    # copy buttons on code (sphinx-copybutton adds them once the page has loaded)
    page.wait_for_selector("button.copybtn", state="attached")
    assert page.locator("button.copybtn").count() >= page.locator("div.highlight").count() > 0
    screenshot(page, "tip-page.png")
    assert not page.js_errors, page.js_errors

    # following the claim link lands on the claim, on the claims page
    if tip.claims:
        header.locator(f'a[href*="claims.html#claim-{tip.claims[0].lower()}"]').first.click()
        page.wait_for_url(re.compile(r"claims\.html#claim-"))
        assert page.locator(f"#claim-{tip.claims[0].lower()}").count() == 1


def test_download_links_fetch_the_real_files(new_page, base_url, tips):
    tip = _example_tip(tips)
    page = new_page()
    page.goto(f"{base_url}/{tip.docname}.html")
    for kind, suffix in (("python", ".py"), ("jupyter", ".ipynb")):
        link = page.locator(f".sphx-glr-download-{kind} a").first
        assert link.is_visible(), f"no visible {suffix} download button"
        href = urljoin(page.url, link.get_attribute("href"))
        assert href.endswith(tip.name + suffix), href
        response = page.request.get(href)
        assert response.status == 200, f"{href}: HTTP {response.status}"
        body = response.body()
        assert body, f"{href} is empty"
        if suffix == ".py":
            compile(body.decode("utf-8"), href, "exec")
            assert "RESULT" in body.decode("utf-8")
        else:
            notebook = json.loads(body)
            assert notebook["cells"] and notebook["nbformat"] >= 4


def test_index_filter_hides_and_shows_cards(new_page, base_url, tips):
    page = new_page()
    page.goto(f"{base_url}/index.html")
    cards = page.locator(".tip-card")
    assert cards.count() == len(tips), "the home page must show one card per tip"
    decided = [c for c in cards.all()
               if re.search(r"\btc-v-\w+-(holds|depends|outdated|wrong)\b", c.get_attribute("class"))]
    assert decided, "no card shows a verdict"
    for card in decided[:3]:
        assert card.locator(".tip-verdict").first.is_visible()
        assert card.locator(".tip-card-takeaway").inner_text().strip()
    page.wait_for_selector("#tip-filter:not([hidden])")
    screenshot(page, "home.png")

    # a tag that some but not all tips carry
    counts = {tag: sum(tag in t.tags for t in tips) for tag in tipmeta.vocab()["tags"]}
    tag = next((t for t, n in counts.items() if 0 < n < len(tips)), None)
    assert tag, "every tip has the same tags: the filter cannot be exercised"
    chip = page.locator(f'.tip-filter-chip[data-facet="tag"][data-value="{tag}"]')
    chip.click()
    assert chip.get_attribute("aria-pressed") == "true"
    visible = page.locator(".tip-card:visible")
    assert visible.count() == counts[tag], f"filter on {tag}: {visible.count()} cards shown, want {counts[tag]}"
    assert page.locator(".tip-filter-count").inner_text() == f"Showing {counts[tag]} of {len(tips)} tips"
    assert f"tag={tag}" in page.url
    chip.click()
    assert page.locator(".tip-card:visible").count() == len(tips)

    # verdict and device facets combine with AND; "Show all" brings every card back
    verdict = page.locator('.tip-filter-chip[data-facet="verdict"]').first
    value = verdict.get_attribute("data-value")
    verdict.click()
    count = """([prefix, suffix]) => Array.from(document.querySelectorAll('.tip-card')).filter(c =>
        Array.from(c.classList).some(k => k.startsWith(prefix) && k.endsWith(suffix))).length"""
    n_verdict = page.evaluate(count, ["tc-d-", f"-{value}"])
    assert page.locator(".tip-card:visible").count() == n_verdict
    page.locator('.tip-filter-chip[data-facet="device"][data-value="cpu"]').click()
    assert page.locator(".tip-card:visible").count() == page.evaluate(count, ["tc-d-cpu-", f"-{value}"])
    page.locator(".tip-filter-clear").click()
    assert page.locator(".tip-card:visible").count() == len(tips)

    # a shared link with ?tag= opens filtered
    page.goto(f"{base_url}/index.html?tag={tag}")
    page.wait_for_selector("#tip-filter:not([hidden])")
    assert page.locator(".tip-card:visible").count() == counts[tag]
    assert not page.js_errors, page.js_errors


def test_one_page_per_tag_lists_its_tips(new_page, base_url, tips):
    used = sorted({tag for t in tips for tag in t.tags})
    page = new_page()
    page.goto(f"{base_url}/generated/tags/index.html")
    for tag in used:
        assert page.locator(f'a[href$="{tag}.html"]').count() >= 1, f"tag index misses {tag}"
    for tag in used:
        page.goto(f"{base_url}/generated/tags/{tag}.html")
        shown = {docname_of(urljoin(page.url, a.get_attribute("href")), base_url)
                 for a in page.locator(".tip-card-title a").all()}
        assert shown == {t.docname for t in tips if tag in t.tags}, f"tag page {tag}"


@pytest.mark.parametrize("where", ["index", "tip"])
def test_phone_width_and_dark_mode(new_page, base_url, tips, where):
    page = new_page(width=390, height=844, dark=True)
    url = "index.html" if where == "index" else f"{_example_tip(tips).docname}.html"
    page.goto(f"{base_url}/{url}")
    # nothing of ours makes the page wider than the phone
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"{url} is {overflow}px wider than a 390px phone"
    # furo's dark palette applies, and our cards and badges follow it
    luminance = page.evaluate("""sel => {
        const rgb = getComputedStyle(document.querySelector(sel)).backgroundColor.match(/\\d+/g).map(Number);
        return (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255; }""",
        "body")
    assert luminance < 0.3, f"{url}: body background is not dark in dark mode ({luminance:.2f})"
    if where == "index":
        card = page.evaluate("""() => {
            const c = document.querySelector('.tip-card');
            const bg = getComputedStyle(c).backgroundColor.match(/\\d+/g).map(Number);
            const fg = getComputedStyle(c.querySelector('.tip-card-takeaway')).color.match(/\\d+/g).map(Number);
            const l = v => (0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]) / 255;
            return [l(bg), l(fg), c.getBoundingClientRect().right <= window.innerWidth]; }""")
        assert card[0] < 0.3 < card[1], f"card background/text not dark-mode colours: {card}"
        assert card[2], "a card sticks out of the phone screen"
        screenshot(page, "home-phone-dark.png")
    else:
        assert page.locator(".tip-header .tip-verdict").first.is_visible()
        screenshot(page, "tip-phone-dark.png", full_page=False)
    assert not page.js_errors, page.js_errors


# --- figures, phones, dark mode, code blocks (issues 14 and 18) -------------------------------------

# sphinx-gallery's class for a cell's one figure, or each of several figures of a cell
FIGURE_IMG = "img.sphx-glr-single-img, img.sphx-glr-multi-img"


def _figure_tip(tips: list[tipmeta.Tip]) -> tipmeta.Tip:
    """A tip whose page shows a figure: the exemplar when it draws, else the first that does."""
    def draws(t):
        record = records.read_record(settings.TIPS_OUT_DIR / t.topic / t.path.name)
        return bool(record and record.get("figures"))

    ordered = sorted(tips, key=lambda t: t.name != "tip_inference_mode")
    tip = next((t for t in ordered if draws(t)), None)
    assert tip, "no tip draws a figure"
    return tip


def test_figure_in_dark_mode_on_a_phone_is_visible_and_fits(new_page, base_url, tips):
    """furo's dark theme as a reader picks it (localStorage "theme"), a 390 px wide screen."""
    tip = _figure_tip(tips)
    page = new_page(width=390, height=844, dark=True)
    page.goto(f"{base_url}/index.html")
    page.evaluate("() => localStorage.setItem('theme', 'dark')")
    page.goto(f"{base_url}/{tip.docname}.html")
    assert page.evaluate("() => document.body.dataset.theme") == "dark"
    figure = page.locator(FIGURE_IMG).first
    figure.scroll_into_view_if_needed()
    assert figure.is_visible()
    box = page.evaluate("""() => {
        const img = document.querySelector('img.sphx-glr-single-img, img.sphx-glr-multi-img');
        const frame = img.closest('a.tips-figure-link');
        const r = (frame || img).getBoundingClientRect();
        const article = document.querySelector('article') || document.body;
        const a = article.getBoundingClientRect();
        return {loaded: img.complete && img.naturalWidth > 0, left: r.left, right: r.right,
                width: img.getBoundingClientRect().width, height: img.getBoundingClientRect().height,
                articleLeft: a.left, articleRight: a.right, link: frame && frame.href,
                viewport: window.innerWidth, filter: getComputedStyle(img).filter, alt: img.alt,
                overflow: document.documentElement.scrollWidth - window.innerWidth}; }""")
    assert box["loaded"], f"{tip.name}: the figure did not load"
    assert box["width"] > 200 and box["height"] > 100, f"{tip.name}: figure too small to read: {box}"
    # the figure's frame fits the column; a figure wider than a phone scrolls inside it (issue 34:
    # its legend stays at least 9 px), and links to the full image
    assert box["left"] >= box["articleLeft"] - 1 and box["right"] <= box["articleRight"] + 1, box
    assert box["right"] <= box["viewport"] and box["overflow"] <= 1, f"wider than the page: {box}"
    assert box["link"] and box["link"].split("/")[-1].startswith("sphx_glr_"), box["link"]
    # matplotlib draws dark text on white: dark mode shows the figure's dark variant (inverted)
    assert "invert" in box["filter"], box["filter"]
    assert len(box["alt"]) > 40 and re.search(r"\d", box["alt"]), box["alt"]
    screenshot(page, "figure-phone-dark.png", full_page=False)
    assert not page.js_errors, page.js_errors


COUNT_SCROLLING = """() => {
    const wide = el => el.scrollWidth > el.clientWidth + 1;
    const code = [...document.querySelectorAll('div.highlight pre')]
        .filter(pre => !pre.closest('.sphx-glr-script-out'));
    const out = [...document.querySelectorAll('.sphx-glr-script-out pre')];
    return {code: code.length, out: out.length,
            codeWide: code.filter(wide).map(p => p.textContent.split('\\n')
                .reduce((a, b) => a.length >= b.length ? a : b).slice(0, 100)),
            outWide: out.filter(wide).length}; }"""


def test_no_code_or_output_block_scrolls_sideways_at_1440px(new_page, base_url, tips):
    """Every tip page on a 1440 px screen: no code block or printed output scrolls sideways."""
    page = new_page(width=1440, height=900)
    totals = {"code": 0, "out": 0}
    wide: dict[str, list] = {}
    for tip in tips:
        page.goto(f"{base_url}/{tip.docname}.html")
        page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
        counts = page.evaluate(COUNT_SCROLLING)
        totals["code"] += counts["code"]
        totals["out"] += counts["out"]
        if counts["codeWide"] or counts["outWide"]:
            wide[tip.name] = counts["codeWide"] + [f"{counts['outWide']} output block(s)"] * bool(counts["outWide"])
    print(f"blocks checked at 1440 px: {totals['code']} code, {totals['out']} output")
    assert totals["code"] > 0
    assert not wide, f"blocks that scroll sideways at 1440 px (longest line shown): {wide}"


def test_computation_times_pages_work_without_jquery_and_are_linked(new_page, base_url):
    page = new_page()
    page.goto(f"{base_url}/how_built.html")
    link = page.locator('a[href$="sg_execution_times.html"]').first
    assert link.is_visible(), "How this site is built does not link the computation times"
    link.click()
    page.wait_for_url(re.compile(r"sg_execution_times\.html"))
    table = page.locator("table.sg-times")
    assert table.count() == 1 and table.locator("tbody tr").count() >= 1
    assert page.locator("script[src*='jquery'], script[src*='dataTables']").count() == 0
    topics = page.locator('a[href*="/sg_execution_times.html"]')
    assert topics.count() >= 1, "the page for all tips does not link the pages per topic"
    href = topics.first.get_attribute("href")
    page.goto(urljoin(page.url, href))
    assert page.locator("table.sg-times").count() == 1
    assert not page.js_errors, page.js_errors


def test_copying_a_doctest_drops_the_prompts(new_page, base_url):
    page = new_page()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto(f"{base_url}/reference/quick.html")
    block = page.locator("div.highlight", has_text=">>> ").first
    assert block.count(), "the quick reference has no >>> example"
    shown = block.inner_text()
    block.hover()
    block.locator("xpath=..").locator("button.copybtn").first.click()
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert copied.strip(), "nothing was copied"
    assert ">>>" not in copied and not re.search(r"^\.\.\. ", copied, re.M), copied
    first = next(ln for ln in shown.splitlines() if ln.startswith(">>> "))
    assert first[4:].strip() in copied
    assert not page.js_errors, page.js_errors


def test_favicon_is_served(new_page, base_url):
    page = new_page()
    page.goto(f"{base_url}/index.html")
    href = page.locator('link[rel~="icon"]').first.get_attribute("href")
    assert href, "no favicon link"
    response = page.request.get(urljoin(page.url, href))
    assert response.status == 200 and b"<svg" in response.body()


def test_cards_have_inner_padding(new_page, base_url):
    page = new_page(width=1440, height=900)
    page.goto(f"{base_url}/index.html")
    boxes = page.evaluate("""() => [...document.querySelectorAll('.tip-card')].slice(0, 6).map(c => {
        const r = c.getBoundingClientRect(), s = getComputedStyle(c);
        const kids = [...c.querySelectorAll('img, .tip-card-title, .tip-card-takeaway')]
            .map(k => k.getBoundingClientRect());
        return {pad: parseFloat(s.paddingLeft), left: Math.min(...kids.map(k => k.left)) - r.left,
                right: r.right - Math.max(...kids.map(k => k.right))}; })""")
    assert boxes
    for b in boxes:
        assert b["pad"] >= 8 and b["left"] >= 8 and b["right"] >= 8, b


def test_compatibility_badges_do_not_break_mid_word_on_a_phone(new_page, base_url):
    page = new_page(width=390, height=844)
    page.goto(f"{base_url}/reference/compat.html")
    broken = page.evaluate("""() => [...document.querySelectorAll('table.tips-compat .tip-verdict')]
        .filter(b => b.getClientRects().length > 1 || b.scrollWidth > b.clientWidth + 1)
        .map(b => b.textContent)""")
    assert page.locator("table.tips-compat .tip-verdict").count() > 0
    assert not broken, f"badges broken across lines: {broken[:10]}"
    # words in the cells wrap between words only: no cell is narrower than its longest word
    narrow = page.evaluate("""() => [...document.querySelectorAll('table.tips-compat td')]
        .filter(td => td.scrollWidth > td.clientWidth + 1).length""")
    assert narrow == 0
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"the compatibility page is {overflow}px wider than the phone"
    screenshot(page, "compat-phone.png", full_page=False)


def test_api_names_link_to_pytorch_docs_and_the_apis_page_lists_tips(new_page, base_url, tips):
    page = new_page()
    page.goto(f"{base_url}/generated/apis.html")
    external = page.locator('a.reference.external[href^="https://docs.pytorch.org/docs/stable/"]')
    assert external.count() >= 10, "API names on the APIs page are not linked to PyTorch's docs"
    entry = page.locator("#api-torch-no-grad")
    if entry.count():
        assert entry.locator("xpath=following-sibling::*[1]").locator("a[href*='tip_']").count() >= 1
    tip = _example_tip(tips)
    page.goto(f"{base_url}/{tip.docname}.html")
    docs = page.locator(".tip-header a.reference.external[href^='https://docs.pytorch.org/']")
    assert docs.count() >= 1, "the tip's Documentation line links no API name to PyTorch's docs"
    assert page.locator("a[href*='apis.html#api-']").count() >= 1, "no link to the APIs page"
    assert not page.js_errors, page.js_errors


# --- accessibility: axe-core in the browser (issue 25, item 6) --------------------------------------

AXE_PAGES = {"home": "index.html", "tip": None, "compatibility": "reference/compat.html",
             "search": "search.html?q=inference_mode", "search-box": "index.html"}


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("where", list(AXE_PAGES))
def test_axe_finds_no_critical_violation(new_page, base_url, tips, axe_source, where, theme):
    """axe-core on the home page, a tip page, the compatibility page, the search page (with its
    results and filters shown) and the home page with the search box's results open, in furo's
    light and dark themes: no critical violation."""
    url = AXE_PAGES[where] or f"{_example_tip(tips).docname}.html"
    page = new_page(dark=theme == "dark")
    # furo's toggle stores the reader's choice; the context's prefers-color-scheme agrees with it
    page.add_init_script(f"localStorage.setItem('theme', '{theme}')")
    page.goto(f"{base_url}/{url}")
    assert page.evaluate("() => document.body.dataset.theme") == theme
    if where == "search":
        wait_for_search(page, "inference_mode")
        page.wait_for_selector("#tips-search-panel pagefind-filter-dropdown button", state="attached")
    elif where == "home":
        page.wait_for_selector("#tip-filter:not([hidden])")
    elif where == "search-box":
        page.locator("input.sidebar-search").fill("memory")
        wait_for_search(page, "memory")
        page.wait_for_selector("#tips-search-panel pagefind-filter-dropdown button", state="attached")
    violations = axe_violations(page, axe_source)
    critical = [v for v in violations if v["impact"] == "critical"]
    others = {v["id"]: (v["impact"], len(v["nodes"])) for v in violations if v["impact"] != "critical"}
    print(f"axe-core {AXE_VERSION} on {where} {url} ({theme}): {sum(len(v['nodes']) for v in critical)} "
          f"critical; others {others}")
    assert not critical, (f"axe-core {AXE_VERSION} finds critical violations on {url} in the {theme} "
                          f"theme:\n{describe_violations(critical)}")
    assert not page.js_errors, page.js_errors


# --- issue 34: each device's own state, tables on a phone, figures in dark mode -----------------------
# On a page made here from the site's own CSS and scripts (no build needed): the cards' classes as
# TipView.card_classes writes them, a table as a list-table renders, a figure as sphinx-gallery's.

STATIC = settings.ROOT / "tipsite" / "sphinxext" / "static"


def _static_page(page, body: str, theme: str = "light") -> None:
    from tipsite.sphinxext import cards

    words = json.dumps(cards.filter_words()).replace('"', "&quot;")
    page.set_content(f"""<!doctype html><html><head><meta name="viewport" content="width=device-width">
        <style>body {{ margin: 0; font: 16px sans-serif; }} article {{ padding: 0 16px; }}
        article {{ max-width: 742px; }} img {{ max-width: 100%; }}</style></head>
        <body data-theme="{theme}"><article>{body.replace("WORDS", words)}</article></body></html>""")
    page.add_style_tag(path=str(STATIC / "tips.css"))
    page.add_script_tag(path=str(STATIC / "tips_filter.js"))
    page.add_script_tag(path=str(STATIC / "tips_tables.js"))


CARDS = """<div id="tip-filter" class="tip-filter" data-words="WORDS" hidden></div>
<div class="tip-card tc-tag-a tc-d-cpu-current-holds tc-d-cuda-not-measured-none" id="c1"></div>
<div class="tip-card tc-tag-a tc-d-cpu-current-wrong tc-d-cuda-current-holds" id="c2"></div>
<div class="tip-card tc-tag-b tc-d-cpu-current-holds tc-d-cuda-older-tip-version-holds" id="c3"></div>
<div class="tip-card tc-tag-b tc-d-cpu-current-depends tc-d-cuda-older-tip-version-wrong" id="c4"></div>
<div class="tip-card tc-tag-b tc-d-cpu-current-holds tc-d-cuda-not-applicable-none" id="c5"></div>"""


def test_the_filter_matches_device_verdict_and_state_on_one_device(new_page):
    page = new_page()
    _static_page(page, CARDS)

    def press(facet, value):
        page.locator(f'.tip-filter-chip[data-facet="{facet}"][data-value="{value}"]').click()

    def shown():
        return page.evaluate("() => Array.from(document.querySelectorAll('.tip-card'))"
                             ".filter(c => !c.hidden).map(c => c.id)")

    press("device", "cuda")  # the tips that run on CUDA, whatever their state there
    assert shown() == ["c1", "c2", "c3", "c4"]
    press("verdict", "holds")  # CUDA's verdict holds (c1 and c5 hold on the CPU only)
    assert shown() == ["c2", "c3"]
    press("state", "older-tip-version")  # narrows: CUDA's holds from an older tip version
    assert shown() == ["c3"]
    press("verdict", "holds")
    press("verdict", "wrong")  # the cudnn case: "CUDA wrong, older tip version" is found
    assert shown() == ["c4"]
    press("device", "cuda")  # any device wrong on an older tip version
    assert shown() == ["c4"]
    texts = page.eval_on_selector_all(".tip-filter-chip", "cs => cs.map(c => c.textContent)")
    assert {"CUDA", "holds", "older tip version", "not applicable"} <= set(texts), texts
    assert not page.js_errors, page.js_errors


MEASURED_ON = """<div class="table-wrapper"><table class="docutils align-default tip-measured-on">
<thead><tr><th>device</th><th>machine class</th><th>torch</th><th>date</th><th>verdict</th>
<th>what decided it</th><th>from</th></tr></thead><tbody>""" + "".join(
    f"""<tr><td>CUDA</td><td>NVIDIA H200, compute capability 9.0, CUDA 13.0 ({i})</td>
<td>2.11.0+cu130</td><td>2026-11-26 10:00 UTC</td><td><span class="tip-verdict tip-verdict-depends">depends</span></td>
<td>1.22x with 1 element per row; 1x for an MLP (interval 1.18–1.25x, 12 rounds)</td>
<td>result set cuda-nvidia-h200-torch2.11.0+cu130-2026-11-26.json</td></tr>""" for i in range(3)) + \
    "</tbody></table></div>"


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_tables_stack_on_a_phone_and_fit_their_column(new_page, dark):
    """At 390 px each row is one block whose cells say their column (device and verdict stay
    together); at 1280 px no table is wider than its column."""
    page = new_page(width=390, height=844, dark=dark)
    _static_page(page, MEASURED_ON, "dark" if dark else "light")
    rows = page.evaluate("""() => Array.from(document.querySelectorAll('tbody tr')).map(tr => {
        const r = tr.getBoundingClientRect();
        const cells = Array.from(tr.cells).map(td => ({label: td.dataset.label,
            before: getComputedStyle(td, '::before').content, box: td.getBoundingClientRect()}));
        return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, cells:
            cells.map(c => ({label: c.label, before: c.before, inside: c.box.top >= r.top - 1
                && c.box.bottom <= r.bottom + 1 && c.box.right <= r.right + 1}))}; })""")
    assert len(rows) == 3
    for row in rows:
        assert row["right"] <= 390, row
        labels = [c["label"] for c in row["cells"]]
        assert labels[0] == "device" and labels[4] == "verdict", labels
        assert all(c["inside"] for c in row["cells"]), row  # the device and its verdict together
        assert row["cells"][4]["before"] == '"verdict: "', row["cells"][4]
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"the page scrolls sideways by {overflow}px at 390 px"
    screenshot(page, f"table-phone-{'dark' if dark else 'light'}.png")
    page.set_viewport_size({"width": 1280, "height": 900})
    widths = page.evaluate("""() => { const t = document.querySelector('table');
        return [t.getBoundingClientRect().width, t.closest('article').clientWidth,
                getComputedStyle(t.querySelector('thead')).display]; }""")
    assert widths[0] <= widths[1] + 1, f"a table {widths[0]}px wide in a {widths[1]}px column"
    assert widths[2] != "none", "the header row is hidden at 1280 px"
    screenshot(page, f"table-1280-{'dark' if dark else 'light'}.png")
    assert not page.js_errors, page.js_errors


def test_figures_have_a_dark_variant_link_to_their_image_and_read_on_a_phone(new_page, tmp_path):
    """A figure (tipkit's: 5.6 in wide, legend at 10 pt) links to its full image; in dark mode it
    shows its dark variant; at 360 px its legend text is at least 9 px, inside its own frame."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tipsite.sphinxext.figures import link_figures

    fig, ax = plt.subplots(figsize=(5.6, 3.6), layout="constrained")
    ax.plot([1, 2, 3], [1, 2, 1.5], label="baseline")
    ax.legend(fontsize=10)
    png = tmp_path / "fig.png"
    fig.savefig(png, dpi=100)
    plt.close(fig)
    # as sphinx-gallery writes it: src, srcset, alt, then class with spaces around "="
    img = (f'<img src="{png.as_uri()}" srcset="{png.as_uri()}" alt="a figure" '
           'class = "sphx-glr-single-img"/>')
    body = link_figures(img)
    assert body.count(f'href="{png.as_uri()}"') == 2 and link_figures(body) == body
    for theme in ("light", "dark"):
        page = new_page(width=360, height=740, dark=theme == "dark")
        page.goto(png.parent.as_uri())
        _static_page(page, body, theme)
        page.wait_for_function("() => document.querySelector('img').complete")
        box = page.evaluate("""() => { const i = document.querySelector('img');
            const a = i.closest('a');
            return {width: i.getBoundingClientRect().width, natural: i.naturalWidth,
                    filter: getComputedStyle(i).filter, link: a && a.href,
                    frame: a.getBoundingClientRect().right,
                    overflow: document.documentElement.scrollWidth - window.innerWidth}; }""")
        legend_px = 10 / 72 * 100 * box["width"] / box["natural"]
        assert legend_px >= 9, f"legend text {legend_px:.1f}px at 360 px: {box}"
        assert box["overflow"] <= 1 and box["frame"] <= 360, box
        assert box["link"] == png.as_uri()
        assert ("invert" in box["filter"]) == (theme == "dark"), box
        screenshot(page, f"figure-360-{theme}.png", full_page=False)
        assert not page.js_errors, page.js_errors


TABLE_WIDTHS = """() => Array.from(document.querySelectorAll('article table')).map(t => ({
    cls: t.className, width: Math.round(t.getBoundingClientRect().width),
    column: Math.round(t.closest('article').getBoundingClientRect().width)}))"""


def test_no_table_is_wider_than_its_column_and_rows_stack_on_a_phone(new_page, base_url, tips):
    """At 1280 px the benchmark's tables (How this site is built) and a tip's tables fit their
    column; at 390 px, dark, a tip's "Measured on" rows are blocks holding device and verdict."""
    page = new_page(width=1280, height=900)
    tip = _example_tip(tips)
    wide = []
    for url in ("how_built.html", f"{tip.docname}.html"):
        page.goto(f"{base_url}/{url}")
        widths = page.evaluate(TABLE_WIDTHS)
        assert widths, url
        wide += [(url, w) for w in widths if w["width"] > w["column"] + 1]
    assert not wide, f"tables wider than their column at 1280 px: {wide}"
    page = new_page(width=390, height=844, dark=True)
    page.goto(f"{base_url}/{tip.docname}.html")
    rows = page.evaluate("""() => Array.from(document.querySelectorAll('table.tip-measured-on tbody tr'))
        .map(tr => { const r = tr.getBoundingClientRect();
          const cell = name => Array.from(tr.cells).find(td => td.dataset.label === name);
          const inside = td => { const b = td.getBoundingClientRect();
            return b.top >= r.top - 1 && b.bottom <= r.bottom + 1 && b.right <= window.innerWidth; };
          return {device: inside(cell('device')), verdict: inside(cell('verdict')),
                  display: getComputedStyle(tr).display}; })""")
    assert rows and all(r["device"] and r["verdict"] and r["display"] == "block" for r in rows), rows
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, overflow
    page.locator("table.tip-measured-on").scroll_into_view_if_needed()
    screenshot(page, "measured-on-phone-dark.png", full_page=False)
    assert not page.js_errors, page.js_errors

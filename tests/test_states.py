"""One word per state (issue 25, item 3): a device's state on a tip reads the same everywhere.

A reader met five names for one state ("CUDA stale" on a card, "holds, older tip version" in a
thumbnail, "not measured" in search, "not-measured" on a chip...) and two "cuda" chips (a tag
and a device). The words are defined once, in the one table :data:`tipsite.sphinxext.vocabulary.STATES` (issue 34:
"older tip version", not "older version", which read as an older torch), through
:mod:`tipsite.sphinxext.view` (``DeviceView.label`` and ``DeviceView.token``); the cards, the
claims page, the filter chips, the search results and the thumbnails take them from there. These tests check the definitions,
then the built pages (``html_dir``: the full site, or ``TIPS_TEST_HTML``) and the home page's
chips in the browser.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from conftest import page_text

from tipsite import records, tipmeta
from tipsite.sphinxext import cards, view
from tipsite.sphinxext.view import DeviceView

pytest_plugins = ["_browser"]

# What no page may show any more: the old names of "older tip version" and "not measured", and
# tokens where words belong.
RETIRED = ("CUDA stale", "CPU stale", "not-measured", "older-version", "older-tip-version",
           "not-applicable")
# "holds, older version": the label before issue 34 ("an older version of the tip" is prose)
RETIRED_RE = re.compile(r", older version\b|\bstale\b")


def _device(state: str, verdict: str | None = "holds", device: str = "cuda") -> DeviceView:
    decision = {"verdict": verdict} if verdict else None
    return DeviceView(device, state, decision=decision if state != "not measured" else None)


def test_the_words_are_defined_once_and_tokens_spell_them():
    assert set(view.STATE_WORDS) == set(view.STATE_TOKENS) == {
        "measured", "stale", "not measured", "not applicable"}
    for state, word in view.STATE_WORDS.items():
        # a token is its word, hyphenated (CSS classes, search metadata)
        assert view.STATE_TOKENS[state] == word.replace(" ", "-")
    assert _device("measured").label == "holds" and _device("measured").token == "holds"
    assert _device("stale", "depends").label == "depends, older tip version"
    assert _device("stale", "depends").token == "older-tip-version"
    assert _device("not measured", None).label == "not measured"
    assert _device("not measured", None).token == "not-measured"


@pytest.fixture
def state_role():
    """The ``tip-state`` role registered with docutils for one test, and removed after it (left
    behind, a later in-process Sphinx build would refuse to register it again)."""
    from docutils.parsers.rst import roles

    roles.register_local_role("tip-state", cards.state_role)
    yield
    roles._roles.pop("tip-state", None)


@pytest.mark.parametrize("state, verdict", [("measured", "holds"), ("measured", "inconclusive"),
                                            ("stale", "wrong"), ("not measured", None)])
def test_a_badge_shows_the_label_in_the_tokens_style(state, verdict, state_role):
    from docutils import nodes
    from docutils.core import publish_doctree

    d = _device(state, verdict)
    badge = cards.state_badge(d)
    assert badge == f":tip-state:`{d.label} <{d.token}>`"
    tree = publish_doctree(f"CUDA {badge}")
    (node,) = [n for n in tree.findall(nodes.inline) if "tip-verdict" in n["classes"]]
    assert node.astext() == d.label and f"tip-verdict-{d.token}" in node["classes"]


def test_a_badge_refuses_a_token_it_does_not_know(state_role):
    from docutils import nodes
    from docutils.core import publish_doctree

    tree = publish_doctree(":tip-state:`holds <sneaky>`", settings_overrides={"report_level": 5})
    assert not [n for n in tree.findall(nodes.inline) if "tip-verdict" in n["classes"]]
    assert cards.state_badge(SimpleNamespace(token="sneaky", label="x")) == ""


def test_the_chips_words_and_devices_cannot_be_confused_with_tags():
    words = cards.filter_words()
    assert set(words["state"].values()) == {"current", "older tip version", "not measured",
                                             "not applicable"}
    assert all(words["verdict"][v] == v for v in cards.verdict_words())
    devices = words["device"]
    assert devices == {d: records.device_word(d) for d in tipmeta.vocab()["devices"]}
    # a device chip says "CUDA", a tag chip "#cuda": never the same text, whatever the case
    tags = {f"#{t}" for t in tipmeta.vocab()["tags"]}
    assert not {w.lower() for w in devices.values()} & {t.lower() for t in tags}
    # no word is both a verdict and a state (two chips alike)
    assert not set(words["verdict"].values()) & set(words["state"].values())


# --- on the built site ------------------------------------------------------------------------------

def _manifest(html_dir) -> list[dict]:
    from conf import settings

    path = settings.DOCS_DIR / cards.GENERATED / cards.MANIFEST
    return json.loads(path.read_text(encoding="utf-8"))


CARD = re.compile(r'<div class="(tip-card [^"]*)">(.*?)<div class="tip-card-takeaway', re.S)
BADGE = re.compile(r'<span class="tip-verdict tip-verdict-([a-z-]+)">([^<]*)</span>')


def test_cards_and_claims_show_each_devices_label(html_dir):
    rows = {r["docname"]: r for r in _manifest(html_dir)}
    page = (html_dir / "index.html").read_text(encoding="utf-8")
    seen = 0
    for classes, body in CARD.findall(page):
        docname = re.search(r'href="([^"#]+)\.html', body).group(1)
        row = rows[docname]
        badges = BADGE.findall(body)
        assert [(v["token"], v["label"]) for v in row["verdicts"]] == badges, (docname, badges)
        for v in row["verdicts"]:  # the filter reads each device's state and verdict together
            assert f"tc-d-{v['device']}-{v['state_token']}-{v['verdict'] or 'none'}" in classes.split()
        seen += 1
    assert seen == len(rows)
    claims = (html_dir / cards.GENERATED / "claims.html").read_text(encoding="utf-8")
    labels = {v["label"] for r in rows.values() for v in r["verdicts"]}
    assert {label for _, label in BADGE.findall(claims)} <= labels
    for name, text in (("index.html", page_text(page)), ("claims.html", page_text(claims))):
        assert not [w for w in RETIRED if w in text], name
        assert not RETIRED_RE.search(text), f"{name}: {RETIRED_RE.search(text)}"


# --- in the browser: the home page's chips ----------------------------------------------------------

def test_filter_chips_say_words_and_never_two_alike(new_page, base_url):
    page = new_page()
    page.goto(f"{base_url}/index.html")
    page.wait_for_selector("#tip-filter:not([hidden])")
    chips = page.eval_on_selector_all(".tip-filter-chip", "cs => cs.map(c => [c.dataset.facet, "
                                      "c.dataset.value, c.textContent, c.getAttribute('aria-label')])")
    assert chips
    texts = [t.lower() for _, _, t, _ in chips]
    assert len(texts) == len(set(texts)), f"two chips read alike: {sorted(texts)}"
    words = cards.filter_words()
    for facet, value, text, label in chips:
        if facet == "tag":
            assert text == f"#{value}"
        else:
            assert text == words[facet].get(value, value), (facet, value, text)
        assert "-" not in text or facet == "tag", f"a chip shows a token: {text}"
        assert label.endswith(text) and label != text, label  # "Device: CUDA", "Tag: #cuda"
    assert not page.js_errors, page.js_errors


CARD_ENTRIES = """() => Array.from(document.querySelectorAll('.tip-card')).map(c => ({
    hidden: c.hidden, classes: Array.from(c.classList).filter(k => k.startsWith('tc-d-'))}))"""


def test_device_verdict_and_state_chips_match_one_device(new_page, base_url):
    """"CUDA" + "holds" shows the tips whose CUDA verdict holds, not those holding on CPU; adding
    "older tip version" narrows to those whose CUDA "holds" is an older tip version's."""
    page = new_page()
    page.goto(f"{base_url}/index.html")
    page.wait_for_selector("#tip-filter:not([hidden])")

    def shown_and_expected(test) -> tuple[int, int]:
        cards_ = page.evaluate(CARD_ENTRIES)
        expected = sum(any(test(c) for c in card["classes"]) for card in cards_)
        return sum(not card["hidden"] for card in cards_), expected

    def chip(facet, value):
        page.locator(f'.tip-filter-chip[data-facet="{facet}"][data-value="{value}"]').click()

    chip("device", "cuda")
    shown, expected = shown_and_expected(lambda c: c.startswith("tc-d-cuda-")
                                         and "-not-applicable-" not in c)
    assert shown == expected > 0, (shown, expected)
    chip("verdict", "holds")
    shown, expected = shown_and_expected(lambda c: c.startswith("tc-d-cuda-") and c.endswith("-holds"))
    assert shown == expected, (shown, expected)
    cpu_only = shown_and_expected(lambda c: c.startswith("tc-d-cpu-") and c.endswith("-holds"))[1]
    assert cpu_only != expected or expected == 0, "CUDA + holds matched the CPU verdicts"
    chip("state", "older-tip-version")
    narrowed, expected = shown_and_expected(
        lambda c: c == "tc-d-cuda-older-tip-version-holds")
    assert narrowed == expected <= shown, (narrowed, expected, shown)
    assert "state=older-tip-version" in page.url and "device=cuda" in page.url
    assert not page.js_errors, page.js_errors


def test_a_headline_never_shows_an_interval_wider_than_2x():
    """Two processes on two cores measured 4.86x [1.78-9.10]: a figure whose interval's ends
    are more than 2x apart says nothing settled. The header, the cards and the checker show
    it as not settled, with the interval that says why, and never its value; a narrower
    interval keeps its figure."""
    from tipsite.checker import evidence

    wide = {"name": "DDP speed-up, layers 512 wide", "value": 4.86, "low": 1.78,
            "high": 9.10, "unit": "x", "rounds": 6}
    narrow = dict(wide, value=1.88, low=1.3, high=2.5)
    for text in (view.key_text(wide), evidence.key_text(wide)):
        assert "not settled" in text and "4.86" not in text and "9.1" in text, text
    for text in (view.key_text(narrow), evidence.key_text(narrow)):
        assert "not settled" not in text and "1.88" in text, text
    comparisons = [{"name": n, "measure": "ratio", "median": m, "low": lo, "high": hi}
                   for n, m, lo, hi in (("batch 16", 16.6, 6.22, 29.2),
                                        ("batch 1024", 0.9, 0.85, 0.95))]
    decision = {"verdict": "depends", "device": "cpu", "comparisons": comparisons,
                "groups": {}, "key": wide}
    assert "16.6" not in view.headline(decision)
    assert "not settled" in view.headline(decision)

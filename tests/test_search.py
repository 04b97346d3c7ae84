"""What Sphinx's search index holds about tips, and how its own ranking code orders them.

The ranking is Sphinx's unmodified ``searchtools.js`` run in Chromium on the built
``search.html``: the test calls its search directly with each query and reads the scores, so a
failure shows what outranked the answering tip. ``test_browser.py`` types the same queries into
the search box.
"""

from __future__ import annotations

import json
import sys

import pytest

from conf import settings

pytest.register_assert_rewrite("_browser")
from _browser import QUERIES, answering_docnames  # noqa: E402

sys.path.insert(0, str(settings.DOCS_DIR / "_ext"))
from tips_index import search_keywords, subject_keywords  # noqa: E402

pytest_plugins = ["_browser"]  # html_dir, base_url, browser, new_page


@pytest.fixture(scope="module")
def search_index(html_dir) -> dict:
    text = (html_dir / "searchindex.js").read_text(encoding="utf-8")
    start, end = text.index("(") + 1, text.rindex(")")
    return json.loads(text[start:end])


def test_every_tip_keyword_is_an_index_entry_of_its_page(search_index, tips):
    """Subject keywords are main entries (ranked first); the others are plain entries."""
    docnames = search_index["docnames"]
    entries = search_index["indexentries"]
    for tip in tips:
        page = docnames.index(tip.docname)
        assert search_index["titles"][page], tip.name
        subject = subject_keywords(tip)
        assert subject, f"{tip.name}: no keyword names what the tip is about"
        for word in search_keywords(tip):
            hits = [main for doc, _anchor, main in entries.get(word.lower(), []) if doc == page]
            assert hits, f"{tip.name}: keyword {word!r} is not in the search index for its page"
            assert any(hits) == (word in subject), (
                f"{tip.name}: keyword {word!r} should {'' if word in subject else 'not '}be a main entry")


def test_every_query_ranks_its_tip_in_the_first_three(new_page, base_url, tips):
    page = new_page()
    page.goto(f"{base_url}/search.html")
    page.wait_for_function("() => typeof Search !== 'undefined' && Search.hasIndex()")
    failures, report = [], []
    for query in QUERIES:
        expected = answering_docnames(query, tips)
        ranked = page.evaluate("""q => {
            const [query, terms, excluded, highlight, objects] = Search._parseQuery(q);
            // _performSearch returns results in display order reversed (the page pops them)
            return Search._performSearch(query, terms, excluded, highlight, objects)
                .reverse().slice(0, 3).map(r => [r[0], r[4]]); }""", query)
        top = [doc for doc, _score in ranked]
        report.append(f"{query!r}: {ranked}")
        if not expected:
            failures.append(f"{query!r}: no tip examines {QUERIES[query]} yet")
        elif not expected & set(top):
            failures.append(f"{query!r}: top three {ranked}, want one of {sorted(expected)}")
    assert not failures, "\n".join(failures) + "\n\nall rankings:\n" + "\n".join(report)

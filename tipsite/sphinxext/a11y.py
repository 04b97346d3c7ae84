"""Accessibility fixes to the HTML that Sphinx and furo write (axe-core, tests/test_browser.py).

Sphinx (9.0) writes a toctree's caption as ``<p class="caption" role="heading">`` with no
``aria-level``, which ARIA requires of a heading: axe-core's critical ``aria-required-attr`` on
every page, once for the sidebar's "Browse" and once more on a page holding the toctree itself.
:func:`heading_levels` adds ``aria-level="2"`` (the caption heads a list under the page's title)
to the page body and to furo's navigation tree, after furo has computed it.

The search page's filter buttons are Pagefind's, built in the browser: ``tips_search.js`` names
them.
"""

from __future__ import annotations

from sphinx.application import Sphinx

CAPTION = 'class="caption" role="heading"'
LEVELLED = 'class="caption" role="heading" aria-level="2"'
# The context entries that hold rendered toctrees: the page, and furo's sidebar.
HTML_PARTS = ("body", "furo_navigation_tree", "toc")


def add_heading_level(html: str) -> str:
    """``<p class="caption" role="heading">`` -> ``... role="heading" aria-level="2">``."""
    return html.replace(CAPTION + ">", LEVELLED + ">")


def heading_levels(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """html-page-context, after furo's (priority 500): every toctree caption gets its level."""
    for key in HTML_PARTS:
        value = context.get(key)
        if isinstance(value, str) and CAPTION in value:
            context[key] = add_heading_level(value)


def setup(app: Sphinx) -> None:
    app.connect("html-page-context", heading_levels, priority=900)

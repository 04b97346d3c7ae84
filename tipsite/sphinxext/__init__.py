"""The site's Sphinx extension: ``extensions = ["tipsite.sphinxext"]``.

``setup`` only wires features; each lives in its own module:

* :mod:`.state`: the tips' metadata (validated before anything runs), their records (checked
  after sphinx-gallery ran them), the result sets and one view per tip;
* :mod:`.vocabulary`: the one table of a device's states on a tip (current, older tip version,
  not measured, not applicable) in the words every page shows;
* :mod:`.pages`: each tip page's header and footer (templates ``tip_header``/``tip_footer``);
* :mod:`.figures`: the figure a speed or memory tip owes, alt text from the plotted data,
  thumbnails for tips that draw none, every device's points side by side;
* :mod:`.cards`: the card grid, tag pages and the claims page (templates ``cards``, ``tag``,
  ``tags_index``, ``claims``);
* :mod:`.search` and :mod:`.pagefind`: the site's search (Pagefind's index of the built pages);
* :mod:`.apis`: the APIs page (each PyTorch API with the tips using it), links that work offline;
* :mod:`.notebooks`: notebooks without an empty cell, quoted passages as quotes;
* :mod:`.compat`: the torch-release matrix page;
* :mod:`.coverage`: what practitioners ask and the tips that answer it;
* :mod:`.freshness`: pages are rebuilt when the page layer itself changes;
* :mod:`.a11y`: what axe-core finds in Sphinx's and furo's HTML, fixed as pages are written.

Templates live in ``templates/`` and are rendered by :mod:`.render`, which escapes every value.
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx

from tipsite.sphinxext import (
    a11y,
    apis,
    benchpage,
    cards,
    compat,
    coverage,
    figures,
    freshness,
    notebooks,
    pagefind,
    pages,
    state,
)


def _inline_role(css: str, per_value: bool = False):
    def role(name, rawtext, text, lineno, inliner, options=None, content=None):
        classes = [css, f"{css}-{text}"] if per_value else [css]
        return [nodes.inline(text, text, classes=classes)], []

    return role


STATIC = Path(__file__).with_name("static")


def _add_static_path(app: Sphinx, config) -> None:
    """config-inited: the extension ships its own CSS and script; every page's footer links to
    the project's repository (conf/settings.py, REPOSITORY_URL), in furo's footer icons."""
    if str(STATIC) not in config.html_static_path:
        config.html_static_path.append(str(STATIC))
    from conf import settings

    options = dict(config.html_theme_options or {})
    if "footer_icons" not in options:
        options["footer_icons"] = [{
            "name": "The project's repository", "url": settings.repo_url(),
            "html": f'{GITHUB_SVG}<span class="tips-repo-link-text">Source, issues and '
                    "contributions</span>",
            "class": "tips-repo-link"}]
        config.html_theme_options = options
    # |repository_url| and the link target `repository`_ on every page (docs/contribute.rst)
    epilog = (f"\n.. |repository_url| replace:: {settings.repo_url()}\n"
              f".. _repository: {settings.repo_url()}\n")
    if epilog not in (config.rst_epilog or ""):
        config.rst_epilog = (config.rst_epilog or "") + epilog


GITHUB_SVG = ('<svg aria-hidden="true" width="16" height="16" viewBox="0 0 16 16" fill="currentColor">'
              '<path d="M8 0C3.58 0 0 3.58 0 8c0 3.54 2.29 6.53 5.47 7.59.4.07.55-.17.55-.38 0-.19'
              "-.01-.82-.01-1.49-2.01.37-2.53-.49-2.69-.94-.09-.23-.48-.94-.82-1.13-.28-.15-.68-.52-.01"
              "-.53.63-.01 1.08.58 1.23.82.72 1.21 1.87.87 2.33.66.07-.52.28-.87.51-1.07-1.78-.2-3.64"
              "-.89-3.64-3.95 0-.87.31-1.59.82-2.15-.08-.2-.36-1.02.08-2.12 0 0 .67-.21 2.2.82.64-.18 "
              "1.32-.27 2-.27.68 0 1.36.09 2 .27 1.53-1.04 2.2-.82 2.2-.82.44 1.1.16 1.92.08 2.12.51.56"
              ".82 1.27.82 2.15 0 3.07-1.87 3.75-3.65 3.95.29.25.54.73.54 1.48 0 1.07-.01 1.93-.01 2.2 0 "
              '.21.15.46.55.38A8.013 8.013 0 0016 8c0-4.42-3.58-8-8-8z"></path></svg>')


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _add_static_path)
    # The page whose tips-compat-matrix table each tip page links to (when the project has it).
    app.add_config_value("tips_compat_page", "reference/compat", "env")
    # The gallery the tips are written in; sphinx-gallery's examples_dirs receives their downloads.
    app.add_config_value("tips_gallery_source", None, "env")
    app.add_role("tip-verdict", _inline_role("tip-verdict", per_value=True))
    app.add_role("tip-tag", _inline_role("tip-tag"))
    # A device's state in its one word, as a badge: :tip-state:`holds, older version <older-version>`.
    app.add_role("tip-state", cards.state_role)
    # sphinx-gallery executes the tips on builder-inited at the default priority (500).
    app.connect("builder-inited", state.write_downloads, priority=280)
    app.connect("builder-inited", freshness.mark_build_started, priority=290)
    app.connect("builder-inited", freshness.invalidate_executions, priority=300)
    app.connect("builder-inited", freshness.remove_deleted_tips, priority=310)
    app.connect("builder-inited", state.load_tips, priority=400)
    app.connect("builder-inited", notebooks.fix_notebooks, priority=600)
    app.connect("builder-inited", state.check_records, priority=900)
    app.connect("builder-inited", figures.check_figures, priority=910)
    app.connect("builder-inited", state.load_views, priority=950)
    app.connect("builder-inited", figures.write_thumbnails, priority=955)
    app.connect("builder-inited", cards.generate, priority=960)
    app.connect("builder-inited", apis.generate, priority=965)
    app.connect("env-get-outdated", state.result_sets_outdate_tips)
    app.connect("env-get-outdated", freshness.outdate_all_on_change)
    app.connect("env-get-outdated", freshness.outdate_all_after_interruption)
    app.connect("build-finished", freshness.mark_build_finished)
    app.connect("source-read", pages.dress_tip_page)
    app.connect("doctree-resolved", cards.link_tags)
    app.connect("html-page-context", figures.link_figures_in_page)
    pagefind.setup(app)
    a11y.setup(app)
    app.add_directive("tip-cards", cards.TipCards)
    app.add_directive("tips-states", cards.TipsStates)
    app.add_directive("tips-compat-matrix", compat.CompatMatrix)
    app.add_directive("tips-coverage", coverage.Coverage)
    app.connect("env-get-outdated", coverage.read_every_build)
    app.add_directive("tips-bench", benchpage.BenchPage)
    app.add_css_file("tips.css")
    app.add_css_file("tips_compat.css")
    app.add_js_file("tips_filter.js", loading_method="defer")
    app.add_js_file("tips_tables.js", loading_method="defer")
    return {"version": "2.0", "parallel_read_safe": True, "parallel_write_safe": True}

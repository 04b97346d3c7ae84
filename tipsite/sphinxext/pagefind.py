"""The site's search index: Pagefind run over the built HTML at the end of every HTML build.

Pagefind (``pagefind[bin]`` in ``conf/requirements/docs.txt``, its binary shipped in the wheel)
reads the pages ``conf/search.toml`` lists, one search result per page, and writes a static
bundle to ``_static/pagefind/``: the index in chunks the browser fetches as a query needs them,
and its component UI. ``_static/tips_search.js`` drives that UI from furo's search box; nothing
is fetched from outside the built site. Each tip page carries its filters (verdict, device, tag)
and metadata (claim, takeaway, search words) as ``data-pagefind-*`` attributes written by the
header template.

The binary is a pinned requirement: a build without it stops with an error saying how to install
it, rather than publishing a site whose search box finds nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging

from tipsite.sphinxext import search

logger = logging.getLogger(__name__)

BUNDLE = "_static/pagefind"
CONFIG_JS = "tips_search_config.js"
TIMEOUT_S = 300


def executable() -> Path:
    """The Pagefind binary of the ``pagefind_bin`` wheel in this Python environment."""
    try:
        import pagefind_bin

        path = Path(pagefind_bin.get_executable())
    except (ImportError, FileNotFoundError) as exc:
        raise ExtensionError(
            "tipsite: the Pagefind binary is missing, so the site's search index cannot be built "
            f"({exc}). Install the pinned requirements: pip install -r conf/requirements/docs.txt "
            "(they include pagefind[bin]).") from exc
    if not os.access(path, os.X_OK):
        raise ExtensionError(f"tipsite: the Pagefind binary {path} is not executable")
    return path


def command(outdir: Path, subdir: str = BUNDLE) -> list[str]:
    cfg = search.config()
    pages = cfg["pages"]
    glob = pages[0] if len(pages) == 1 else "{" + ",".join(pages) + "}"
    return [str(executable()), "--site", str(outdir), "--output-subdir", subdir,
            "--root-selector", "article", "--exclude-selectors", ", ".join(cfg["exclude"]),
            "--glob", glob, "--force-language", "en"]


def pages_to_index(outdir: Path) -> list[Path]:
    """The HTML files ``pages`` in conf/search.toml names, as Pagefind will find them."""
    return sorted({p for pattern in search.config()["pages"] for p in outdir.glob(pattern) if p.is_file()})


def build_index(app: Sphinx, exception: BaseException | None) -> None:
    """build-finished: index the HTML output with Pagefind (every HTML build, from scratch)."""
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir).resolve()
    # The new index is written beside the old one and swapped in: a page served during a rebuild
    # never finds the index missing (a browser test once did, while another build re-indexed).
    fresh, stale = BUNDLE + ".new", BUNDLE + ".old"
    cmd = command(outdir, fresh)  # first: a missing binary stops the build before anything is touched
    (outdir / "_static").mkdir(parents=True, exist_ok=True)
    (outdir / "_static" / CONFIG_JS).write_text(search.browser_script() + "\n", encoding="utf-8")
    for leftover in (fresh, stale):
        shutil.rmtree(outdir / leftover, ignore_errors=True)
    expected = len(pages_to_index(outdir))
    if expected == 0:
        shutil.rmtree(outdir / BUNDLE, ignore_errors=True)
        logger.info("tipsite: no page to index for search (conf/search.toml `pages`)")
        return
    # Only the command line configures it: no pagefind.yml from a working directory, no
    # PAGEFIND_* variables from the shell.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFIND_")}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as cwd:
        try:
            proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                                  timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise ExtensionError(f"tipsite: Pagefind did not finish within {TIMEOUT_S} s") from exc
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        shutil.rmtree(outdir / fresh, ignore_errors=True)
        raise ExtensionError(f"tipsite: Pagefind failed (exit {proc.returncode}):\n{output[-4000:]}")
    if (outdir / BUNDLE).exists():
        (outdir / BUNDLE).rename(outdir / stale)
    (outdir / fresh).rename(outdir / BUNDLE)
    shutil.rmtree(outdir / stale, ignore_errors=True)
    found = re.search(r"Indexed (\d+) pages?", output)
    count = int(found.group(1)) if found else 0
    if count != expected:
        logger.warning(f"tipsite: Pagefind indexed {count} pages of the {expected} conf/search.toml "
                       f"lists: search misses some\n{output[-2000:]}")
    sizes = bundle_sizes(outdir / BUNDLE)
    logger.info(f"tipsite: search index of {count} pages built by Pagefind in "
                f"{time.perf_counter() - start:.1f} s: index {sizes['index'] / 1024:.0f} KiB, "
                f"search engine {sizes['engine'] / 1024:.0f} KiB, UI {sizes['ui'] / 1024:.0f} KiB")


def bundle_sizes(bundle: Path) -> dict[str, int]:
    """Bytes on disk of the bundle's parts: ``index`` (the pages' words, filters, metadata and
    excerpt fragments), ``engine`` (pagefind.js, its worker and WebAssembly) and ``ui``."""
    sizes = {"index": 0, "engine": 0, "ui": 0}
    for path in bundle.rglob("*"):
        if not path.is_file():
            continue
        if path.parent != bundle or path.suffix == ".pf_meta" or path.name == "pagefind-entry.json":
            part = "index"
        elif path.name in ("pagefind.js", "pagefind-worker.js") or path.name.startswith("wasm."):
            part = "engine"
        else:
            part = "ui"
        sizes[part] += path.stat().st_size
    return sizes


def setup(app: Sphinx) -> None:
    """Wire the search: the index after the build, the page's search script and styles."""
    app.connect("build-finished", build_index)
    app.connect("env-get-outdated", search.outdate_on_change)
    app.add_js_file(CONFIG_JS)
    app.add_js_file("tips_search.js", loading_method="defer")
    app.add_css_file("tips_search.css")

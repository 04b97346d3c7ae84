"""Keep every page true to the current sources, not only to the tip files.

sphinx-gallery re-executes a tip only when the tip's own file changed (its MD5), and Sphinx
re-reads a page only when its source changed. Two more sources decide what a page shows:

* the **execution layer** (the hooks that run and record tips, the record format, the decision
  helpers the build re-derives verdicts with, the thread setting): when its fingerprint changes,
  :func:`invalidate_executions` deletes every tip's MD5 before sphinx-gallery runs, so every tip
  executes again (not in a merge build, which executes nothing: there the packs' manifests must
  carry the same fingerprint, see :mod:`tipsite.shards`);
* the **page layer** (this extension, its templates, the vocabularies and claims): when its
  fingerprint changes, :func:`outdate_all_on_change` marks every page outdated.
"""

from __future__ import annotations

from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

from conf import settings
from tipsite import build

logger = logging.getLogger(__name__)

STAMP = ".execution-fingerprint"


def page_layer_fingerprint() -> str:
    here = Path(__file__).parent
    paths = sorted(here.rglob("*.py")) + sorted(p for p in (here / "templates").rglob("*") if p.is_file())
    paths += [settings.CONF_DIR / "claims.toml", settings.CONF_DIR / "vocab.toml"]
    return build.digest(paths) + build.execution_fingerprint()


def _out_dir(app: Sphinx) -> Path:
    from tipsite.sphinxext.state import gallery_dirs

    return gallery_dirs(app)[1]


def invalidate_executions(app: Sphinx) -> None:
    """builder-inited, before sphinx-gallery: a changed execution layer re-runs every tip."""
    from tipsite import shards

    out = _out_dir(app)
    stamp = out / STAMP
    new = build.execution_fingerprint()
    old = stamp.read_text(encoding="utf-8").strip() if stamp.exists() else None
    if old == new:
        return
    merged = app.config.sphinx_gallery_conf.get("filename_pattern") == shards.NOTHING
    md5s = [] if merged else list(out.glob("*/*.py.md5"))
    for md5 in md5s:
        md5.unlink()
    if md5s:
        logger.info(f"tipsite: the execution layer changed: every tip runs again ({len(md5s)} were cached)")
    out.mkdir(parents=True, exist_ok=True)
    stamp.write_text(new + "\n", encoding="utf-8")


def outdate_all_on_change(app: Sphinx, env, added, changed, removed) -> list[str]:
    """env-get-outdated: a changed page layer re-reads every page."""
    new = page_layer_fingerprint()
    if getattr(env, "tips_page_layer_fp", None) == new:
        return []
    env.tips_page_layer_fp = new
    logger.info("tipsite: the page layer changed: every page is read again")
    return sorted(set(env.found_docs) - set(added))


INCOMPLETE = ".tipsite-build-incomplete"


def mark_build_started(app: Sphinx) -> None:
    """builder-inited: a marker that only a finished build removes. Sphinx saves what it read
    before it writes the pages, so after an interrupted write it would consider those pages
    current; a marker left behind makes the next build read and write every page again."""
    marker = Path(app.outdir) / INCOMPLETE
    app.tips_previous_build_incomplete = marker.exists()  # type: ignore[attr-defined]
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("a build started here and has not finished\n", encoding="utf-8")


def mark_build_finished(app: Sphinx, exception: BaseException | None) -> None:
    """build-finished: a build that raised, or warned (warnings fail the site's builds), keeps its
    marker. Sphinx saved what it read before the warning, so a rebuild would call those pages
    current and succeed with the same fault; the marker makes it read every page again, and
    warn again, until the cause is fixed."""
    if exception is None and not getattr(app, "_warncount", 0):
        (Path(app.outdir) / INCOMPLETE).unlink(missing_ok=True)


def outdate_all_after_interruption(app: Sphinx, env, added, changed, removed) -> list[str]:
    """env-get-outdated: every page, after an unfinished build or when pages come or go (every
    page's navigation lists them)."""
    if getattr(app, "tips_previous_build_incomplete", False):
        logger.info("tipsite: the previous build did not finish, or failed: every page is read again")
        return sorted(set(env.found_docs) - set(added))
    if added or removed:
        return sorted(set(env.found_docs) - set(added))
    return []


def remove_deleted_tips(app: Sphinx) -> None:
    """builder-inited, before sphinx-gallery: a tip deleted from the gallery leaves nothing behind
    (its generated page, downloads, images and record; its HTML page and downloads)."""
    from tipsite import shards, tipmeta
    from tipsite.sphinxext.state import gallery_dirs

    examples, out = gallery_dirs(app)
    if not out.is_dir():
        return
    current = {p.stem for p in tipmeta.tip_files(examples)}
    html = Path(app.outdir)
    for topic_dir in filter(Path.is_dir, out.iterdir()):
        for copy in topic_dir.glob("tip_*.py"):
            if copy.stem in current:
                continue
            for path in shards.tip_output_files(topic_dir, copy.stem):
                path.unlink(missing_ok=True)
            (html / out.name / topic_dir.name / f"{copy.stem}.html").unlink(missing_ok=True)
            for stale in [*html.glob(f"_downloads/*/{copy.stem}.*"), *html.glob(f"_images/sphx_glr_{copy.stem}_*")]:
                stale.unlink(missing_ok=True)
            logger.info(f"tipsite: {copy.stem} is no longer in the gallery: its outputs are removed")

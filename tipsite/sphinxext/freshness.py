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

import hashlib
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

from conf import settings

logger = logging.getLogger(__name__)

TIPSITE = Path(__file__).resolve().parents[1]
EXECUTION_LAYER = ("gallery.py", "records.py", "tipkit.py", "tipmeta.py")
STAMP = ".execution-fingerprint"


def _digest(paths) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def execution_fingerprint() -> str:
    """Changes when anything that decides what an executed tip records changes."""
    paths = [TIPSITE / name for name in EXECUTION_LAYER] + [settings.CONF_DIR / "settings.py",
                                                           settings.CONF_DIR / "vocab.toml"]
    return _digest(paths)


def page_layer_fingerprint() -> str:
    here = Path(__file__).parent
    paths = sorted(here.rglob("*.py")) + sorted(p for p in (here / "templates").rglob("*") if p.is_file())
    paths += [settings.CONF_DIR / "claims.toml", settings.CONF_DIR / "vocab.toml"]
    return _digest(paths) + execution_fingerprint()


def _out_dir(app: Sphinx) -> Path:
    from tipsite.sphinxext.state import gallery_dirs

    return gallery_dirs(app)[1]


def invalidate_executions(app: Sphinx) -> None:
    """builder-inited, before sphinx-gallery: a changed execution layer re-runs every tip."""
    from tipsite import shards

    out = _out_dir(app)
    stamp = out / STAMP
    new = execution_fingerprint()
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

"""The build's shared knowledge, gathered once per build at ``builder-inited``.

* :func:`load_tips` (before sphinx-gallery executes anything): every tip's metadata, validated;
  a bad tip stops the build with ``<file>: <field>: <problem>``.
* :func:`check_records` (after execution): every tip this build executed left a valid record.
* :func:`load_views` (after that): the result sets (committed ``docs/_data/results`` and
  ``TIPS_RESULT_SETS``) and one :class:`~tipsite.sphinxext.view.TipView` per tip.

Views live on the application object, not in the pickled environment: they are rebuilt from the
records on disk by every build, so a page never shows a view from an earlier build.
"""

from __future__ import annotations

import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

from conf import settings
from tipsite import records, tipmeta

# The one table of a device's states on a tip lives in .vocabulary (it imports nothing of the
# site's, so every module reads it without an import circle); state.STATES is the same table.
from tipsite.sphinxext.vocabulary import BUSY, BUSY_WORD, STATES, state_word  # noqa: F401

logger = logging.getLogger(__name__)


def gallery_dirs(app: Sphinx) -> tuple[Path, Path]:
    conf = app.config.sphinx_gallery_conf
    examples, out = conf["examples_dirs"], conf["gallery_dirs"]
    examples = examples[0] if isinstance(examples, (list, tuple)) else examples
    out = out[0] if isinstance(out, (list, tuple)) else out
    src = Path(app.srcdir)
    return (src / examples).resolve(), (src / out).resolve()


def source_dir(app: Sphinx) -> Path:
    """The gallery the tips are written in (``tips_gallery_source``); sphinx-gallery runs their
    downloads, written from it into its ``examples_dirs`` (:func:`write_downloads`)."""
    source = app.config.tips_gallery_source
    if not source:
        stop("tips_gallery_source is not set: name the gallery the tips are written in (conf.py)")
    return (Path(app.srcdir) / source).resolve()


def write_downloads(app: Sphinx) -> None:
    """builder-inited, first: each tip's download (its helpers inlined) into sphinx-gallery's
    examples folder, which sphinx-gallery then executes and publishes (tipsite/tipsource.py)."""
    from tipsite import tipsource

    examples, _ = gallery_dirs(app)
    source = source_dir(app)
    if examples == source:
        stop(f"{source}: sphinx-gallery must run the downloads, not the gallery itself: give "
             "examples_dirs a folder of its own")
    try:
        written = tipsource.write_gallery(source, examples)
    except tipsource.TipSourceError as exc:
        stop(str(exc))
    if written:
        logger.info(f"tipsite: {len(written)} download(s) written to {examples}")


def tips(app: Sphinx) -> list[tipmeta.Tip]:
    return app.env.tips_metadata  # type: ignore[attr-defined]


class BuildStopped(SystemExit):
    """A problem with the sources stops the build with a message naming the file and the problem,
    not with a Sphinx crash report (Sphinx frames every other exception as its own bug)."""


def stop(message: str) -> None:
    raise BuildStopped(f"error: {message}")


def load_tips(app: Sphinx) -> None:
    """builder-inited, before sphinx-gallery: refuse to build a gallery that breaks the contract."""
    examples_dir = source_dir(app)
    try:
        found = tipmeta.read_all(examples_dir)
    except ValueError as exc:
        stop(str(exc))
    if not found:
        stop(f"no tips found under {examples_dir}")
    for topic in sorted({t.path.parent for t in found}):
        if not any((topic / name).exists() for name in ("README.rst", "README.txt", "GALLERY_HEADER.rst")):
            stop(f"{topic}: a topic folder needs a README.rst (its heading on the site); "
                 "without one sphinx-gallery leaves the whole topic out")
    app.env.tips_metadata = found  # type: ignore[attr-defined]


def executes(app: Sphinx, tip: tipmeta.Tip) -> bool:
    """Whether this build executes ``tip``: all tips, or only a shard's (tipsite/shards.py)."""
    pattern = app.config.sphinx_gallery_conf.get("filename_pattern", r"/tip_")
    return re.search(pattern, str(tip.path)) is not None


def check_records(app: Sphinx) -> None:
    """builder-inited, after sphinx-gallery: every tip this build executes has a valid record."""
    _, out_dir = gallery_dirs(app)
    failing = {Path(f).name: tb for f, tb in app.config.sphinx_gallery_conf.get("failing_examples", {}).items()}
    problems = []
    for tip in tips(app):
        if not executes(app, tip):
            continue
        if tip.path.name in failing:
            last = [ln for ln in str(failing[tip.path.name]).strip().splitlines() if ln.strip()]
            problems.append(f"{tip.path.name}: failed: {last[-1] if last else 'see the traceback above'}")
            continue
        try:
            record = records.read_record(out_dir / tip.topic / tip.path.name)
        except records.RecordError as exc:
            problems.append(str(exc))
            continue
        if record is None:
            problems.append(f"{tip.path.name}: ran without defining RESULT (or its result record is missing)")
    if problems:
        stop("tips that failed or left no valid result (their tracebacks are above):\n"
             + "\n".join(problems))


def load_views(app: Sphinx) -> None:
    """builder-inited, after the records were checked: result sets and one view per tip."""
    from tipsite.sphinxext.view import api_names, build_views, related_tips

    try:
        paths = records.committed_paths() + records.paths_from_env()
        sets = records.load_sets(paths)
    except records.RecordError as exc:
        stop(str(exc))
    from tipsite import compat

    # the tip pages show the matrix's runs too ("Measured on"): its files are part of what they show
    matrix_files = [p for p in map(compat.data_path, settings.TORCH_MATRIX) if p.exists()]
    app.env.tips_result_sets_new_fp = records.fingerprint(paths + matrix_files)  # type: ignore[attr-defined]
    if paths:
        logger.info(f"tipsite: showing {len(paths)} result set(s): " + ", ".join(map(str, paths)))
    _, out_dir = gallery_dirs(app)
    all_tips = tips(app)
    related = {t.name: related_tips(t, all_tips) for t in all_tips}
    apis = {t.name: api_names(t) for t in all_tips}
    try:
        compat_runs = compat.load_all()
    except records.RecordError as exc:
        stop(str(exc))
    views = build_views([t for t in all_tips if executes(app, t) or _has_record(out_dir, t)],
                        out_dir, sets, related, apis, compat_runs)
    app.tips_views = views  # type: ignore[attr-defined]


def _has_record(out_dir: Path, tip: tipmeta.Tip) -> bool:
    return records.record_path(out_dir / tip.topic / tip.path.name).exists()


def views(app: Sphinx) -> dict:
    return getattr(app, "tips_views", {})


def tip_for_doc(app: Sphinx, docname: str) -> tipmeta.Tip | None:
    _, out_dir = gallery_dirs(app)
    prefix = out_dir.relative_to(Path(app.srcdir).resolve()).as_posix()
    for tip in tips(app):
        if docname == f"{prefix}/{tip.topic}/{tip.name}":
            return tip
    return None


def result_sets_outdate_tips(app: Sphinx, env, added, changed, removed) -> list[str]:
    """env-get-outdated: when the given result sets change, every tip page is dressed again."""
    new = env.tips_result_sets_new_fp
    if getattr(env, "tips_result_sets_fp", None) == new:
        return []
    env.tips_result_sets_fp = new
    _, out_dir = gallery_dirs(app)
    prefix = out_dir.relative_to(Path(app.srcdir).resolve()).as_posix()
    docs = {f"{prefix}/{tip.topic}/{tip.name}" for tip in tips(app)}
    return sorted(docs & set(env.found_docs) - set(added))

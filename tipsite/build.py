"""The site build's command line and its outputs, in one place.

``nox -s docs``, the shards, the benchmark and the tests all build with :func:`sphinx_args` and
clean with :func:`clean`, for the repository (``root=settings.ROOT``) or for a copy of it.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from conf import settings

# Everything a build writes, relative to the repository root: deleting these makes the next
# build execute every tip again. docs/tips, docs/generated and the execution-times page are
# written inside the Sphinx source tree (sphinx-gallery and the extension generate them).
OUTPUTS = ("build", "docs/tips", "docs/generated", "docs/sg_execution_times.rst", "docs/_build")


def sphinx_args(*, root: Path = settings.ROOT, src: Path | None = None, out: Path | None = None,
                doctrees: Path | None = None, quiet: bool = False) -> list[str]:
    """The arguments after ``sphinx-build`` for the site in ``root`` (or the Sphinx project in
    ``src``): warnings are errors, one process (timing tips run alone; a tip beside a timing tip
    would change its figures)."""
    out = out or root / "build" / "html"
    doctrees = doctrees or root / "build" / "doctrees"
    return ["-b", "html", "-W", "--keep-going", "-j", "1", *(["-q"] if quiet else []),
            "-d", str(doctrees), str(src or root / "docs"), str(out)]


def sphinx_command(**kwargs) -> list[str]:
    """The full command, with this interpreter's Sphinx."""
    return [sys.executable, "-m", "sphinx", *sphinx_args(**kwargs)]


def clean(root: Path = settings.ROOT, keep: tuple[str, ...] = ()) -> None:
    """Remove every build output under ``root`` (but the paths in ``keep``, e.g. shard packs)."""
    for rel in OUTPUTS:
        path = root / rel
        if rel in keep:
            continue
        if path.is_dir():
            if rel == "build" and keep:
                for child in path.iterdir():
                    if f"build/{child.name}" not in keep:
                        shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink()
                continue
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()


def digest(paths) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(Path(path).name.encode())
        h.update(Path(path).read_bytes())
    return h.hexdigest()


# What decides what an executed tip records: the hooks that run it (the gallery hooks, the
# download they execute, the reader's conditions around it, the device table that describes
# the machine), the record format, the decision helpers verdicts are re-derived with, the
# metadata contract, the thread setting. tests/test_build.py checks that every tipsite module
# these import is listed.
EXECUTION_LAYER = ("tipsite/gallery.py", "tipsite/tipsource.py", "tipsite/tiprunner.py",
                   "tipsite/devices.py", "tipsite/tipkit.py", "tipsite/tipmeta.py",
                   "tipsite/gpucheck.py",
                   *(f"tipsite/records/{m}.py" for m in ("__init__", "check", "versions", "store",
                                                         "views", "vet", "rules", "legacy", "cli")),
                   "conf/settings.py", "conf/vocab.toml")


def execution_fingerprint(root: Path = settings.ROOT) -> str:
    """Changes when anything that decides what an executed tip records changes."""
    return digest(root / rel for rel in EXECUTION_LAYER)


def commit(root: Path = settings.ROOT) -> str | None:
    """The checked-out commit, or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None

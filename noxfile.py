"""nox sessions for the PyTorch tips knowledge base. ``nox -l`` lists them.

torch is installed from a pinned version (``conf/settings.py``) before the other requirements,
so a range in a dependency never pulls a different torch build. Virtualenvs are pip-based and
reused: uv would not see the local torch wheels here.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))
from conf import settings  # noqa: E402

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["docs", "tests", "lint"]

REQ = settings.CONF_DIR / "requirements"


def install(session: nox.Session, requirements: str, torch: str = settings.TORCH_DEFAULT) -> None:
    session.install(f"torch=={torch}")
    session.install("-r", str(REQ / requirements), f"torch=={torch}")


def clean_outputs() -> None:
    """Remove every build output, so the next build executes every tip again."""
    for path in (settings.BUILD_DIR, settings.TIPS_OUT_DIR, settings.DOCS_DIR / "generated"):
        shutil.rmtree(path, ignore_errors=True)


def sphinx_build(session: nox.Session, *extra: str) -> None:
    session.run(
        "sphinx-build", "-b", "html", "-W", "--keep-going", "-j", "1",
        "-d", str(settings.DOCTREES_DIR), str(settings.DOCS_DIR), str(settings.HTML_DIR),
        *extra,
    )


@nox.session
def docs(session: nox.Session) -> None:
    """Build the site, executing every changed tip (`-- --clean` re-runs every tip)."""
    args = list(session.posargs)
    if "--clean" in args:
        args.remove("--clean")
        clean_outputs()
    install(session, "docs.txt")
    sphinx_build(session, *args)
    session.log(f"Site built: open {settings.HTML_DIR / 'index.html'}")


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (builds the site once if needed); extra args go to pytest."""
    install(session, "tests.txt")
    session.run("pytest", *session.posargs)


@nox.session(default=False)
@nox.parametrize("torch", list(settings.TORCH_MATRIX))
def matrix(session: nox.Session, torch: str) -> None:
    """Doctests and every tip on one torch release -> docs/_data/compat/torch-<torch>.json."""
    install(session, "matrix.txt", torch)
    session.run("python", "-m", "conf.compat", "run", torch, *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Lint Python sources with ruff."""
    session.install("-r", str(REQ / "lint.txt"))
    session.run("ruff", "check", ".", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Time clean, no-change and one-tip builds and key-ratio stability -> docs/_data/bench.json."""
    install(session, "docs.txt")
    session.run("python", "-m", "conf.bench", *session.posargs)

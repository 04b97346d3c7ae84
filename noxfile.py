"""nox sessions for the PyTorch tips knowledge base. ``nox -l`` lists them.

torch is installed from a pinned version (``conf/settings.py``) before the other requirements,
so a range in a dependency never pulls a different torch build. Virtualenvs are pip-based and
reused: uv would not see the local torch wheels here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))
from conf import settings  # noqa: E402
from tipsite import build, shards  # noqa: E402

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["docs", "tests", "lint"]

REQ = settings.CONF_DIR / "requirements"


def install(session: nox.Session, requirements: str, torch: str = settings.TORCH_DEFAULT) -> None:
    session.install(f"torch=={torch}")
    session.install("-r", str(REQ / requirements), f"torch=={torch}")


def sphinx_build(session: nox.Session, *extra: str, out: Path = settings.HTML_DIR,
                 doctrees: Path = settings.DOCTREES_DIR, env: dict[str, str] | None = None) -> None:
    session.run("sphinx-build", *build.sphinx_args(out=out, doctrees=doctrees), *extra, env=env)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the site, executing every changed tip (`-- --clean` re-runs every tip).

    `-- --shard K/N` executes only shard K of N and packs its output for `nox -s docs_merge`.
    After a build, its results go to build/results/ as one result set (tipsite/records.py).
    """
    try:
        shard, clean, args = build.docs_options(session.posargs)  # before anything is deleted
    except shards.ShardError as exc:
        session.error(str(exc))
    if clean:
        if shard:
            shards.clean_outputs()  # keeps the other shards' packs in build/shards/
        else:
            build.clean()
    install(session, "docs.txt")
    if shard:
        k, n = shard
        where = shards.SHARD_BUILDS_DIR / shards.pack_name(k, n)
        sphinx_build(session, *args, out=where / "html", doctrees=where / "doctrees",
                     env={shards.ENV_VAR: f"{k}/{n}"})
        session.run("python", "-m", "tipsite.shards", "pack", f"{k}/{n}")
        session.log("Shard built: merge every shard with `nox -s docs_merge`")
        return
    sphinx_build(session, *args, env={shards.ENV_VAR: ""})  # every tip, whatever the shell says
    session.run("python", "-m", "tipsite.records", "export")
    session.log(f"Site built: open {settings.HTML_DIR / 'index.html'}")


@nox.session(default=False)
def docs_merge(session: nox.Session) -> None:
    """Merge shard packs (`nox -s docs -- --shard K/N` for each K) into one site, executing nothing.

    `-- PACK...` names the packs (default: every pack in build/shards/). Result sets from other
    builds (e.g. a CUDA runner's) are shown beside this site's figures: TIPS_RESULT_SETS=dir.
    """
    install(session, "docs.txt")
    session.run("python", "-m", "tipsite.shards", "merge", *session.posargs)
    sphinx_build(session, env={shards.ENV_VAR: shards.MERGED})
    session.run("python", "-m", "tipsite.records", "export")
    session.log(f"Merged site built: open {settings.HTML_DIR / 'index.html'}")


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
    session.run("python", "-m", "tipsite.compat", "run", torch, *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Lint Python sources with ruff and the CI workflows with actionlint."""
    session.install("-r", str(REQ / "lint.txt"))
    session.run("ruff", "check", ".", *session.posargs)
    session.run("actionlint", *sorted(str(p) for p in (settings.ROOT / ".github" / "workflows").glob("*.yml")))


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Time clean, no-change and one-tip builds and key-ratio stability -> docs/_data/bench.json."""
    install(session, "docs.txt")
    session.run("python", "-m", "tipsite.bench", *session.posargs)


@nox.session(default=False)
def new_tip(session: nox.Session) -> None:
    """Start a tip from the template: `nox -s new_tip -- TOPIC tip_name`."""
    install(session, "docs.txt")
    session.run("python", "-m", "tipsite.newtip", *session.posargs)


@nox.session(default=False)
def check(session: nox.Session) -> None:
    """Check your code against the tips' evidence: `nox -s check -- PATH...` (files or folders).

    One line per finding with the verdict of the tip that measured it; exit 1 when it found
    something. `-- --format json`, `--torch X.Y`, `--device cpu|cuda`, `--bench` (README).
    """
    session.install("-r", str(REQ / "check.txt"))
    session.run("python", "-m", "tipsite.checker", *session.posargs)

"""nox sessions for the PyTorch tips knowledge base. ``nox -l`` lists them.

torch is installed from a pinned version (``conf/settings.py``) before the other requirements,
so a range in a dependency never pulls a different torch build. Virtualenvs are pip-based and
reused: uv would not see the local torch wheels here.

Which torch build (``TIPS_TORCH_BUILD``, see :func:`install_torch`): ``cpu`` (default) installs
the CPU wheel, never PyPI's multi-GB CUDA build; ``cuda`` (the GPU runner) installs the release
as the configured indexes give it and checks it is a CUDA build. The matrix session installs each
release as the configured indexes give it (on Linux, PyPI's wheels are CUDA builds).
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))
from conf import settings  # noqa: E402
from tipsite import build, contribute, records, shards  # noqa: E402

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["docs", "tests", "lint"]

REQ = settings.CONF_DIR / "requirements"


# Where the CPU wheel comes from when pip's own configuration (find-links, index, mirror) has no
# torch==<version>+cpu. Set TIPS_TORCH_INDEX to a mirror of it, or to "" to never contact an index.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_BUILDS = ("cpu", "cuda", "any")  # TIPS_TORCH_BUILD, see install_torch()
CHECK_CUDA_BUILD = ("import sys, torch\n"
                    "if not torch.version.cuda:\n"
                    "    sys.exit(f'torch {torch.__version__} is not a CUDA build (TIPS_TORCH_BUILD=cuda): delete "
                    "this virtualenv, or point pip at CUDA builds, e.g. "
                    "PIP_INDEX_URL=https://download.pytorch.org/whl/cu130')")


def install(session: nox.Session, requirements: str, torch: str = settings.TORCH_DEFAULT,
            torch_build: str | None = None) -> None:
    """Install torch ``torch`` (:func:`install_torch`), then the requirements file, torch pinned."""
    spec = install_torch(session, torch, torch_build)
    session.install("-r", str(REQ / requirements), spec)


def install_torch(session: nox.Session, version: str, torch_build: str | None = None) -> str:
    """Install torch ``version`` and return the requirement that pins it.

    ``torch_build`` (default: ``TIPS_TORCH_BUILD``, else ``cpu``):

    * ``cpu``: the CPU wheel, ``torch==<version>+cpu``, asked for by name so that pip never
      falls back to PyPI's CUDA build. First from pip's own configuration (``PIP_FIND_LINKS``,
      ``PIP_INDEX_URL``, pip.conf: no ``+cpu`` build is on PyPI, so this fails in seconds where
      none is configured), then from the PyTorch CPU index (``TIPS_TORCH_INDEX``), which is
      probed first so that an unreachable index stops the session at once with a message saying
      how to provide the wheel (instead of pip's retries). macOS has no ``+cpu`` builds: there
      PyPI's wheel is the CPU build.
    * ``cuda``: ``torch==<version>`` from the configured indexes (on Linux x86_64 PyPI's wheel
      is a CUDA build); the session stops unless the installed torch is a CUDA build.
    * ``any``: ``torch==<version>`` from the configured indexes, whatever build they give (the
      torch matrix: older releases come from PyPI as CUDA builds and run on the CPU).
    """
    kind = torch_build or os.environ.get("TIPS_TORCH_BUILD") or "cpu"
    if kind not in TORCH_BUILDS:
        session.error(f"TIPS_TORCH_BUILD={kind!r}: use one of {', '.join(TORCH_BUILDS)}")
    if kind != "cpu" or sys.platform == "darwin":
        spec = f"torch=={version}"
        session.install(spec)
        if kind == "cuda":
            session.run_install("python", "-c", CHECK_CUDA_BUILD, silent=True, log=False)
        return spec
    spec, target = f"torch=={version}+cpu", f"{version}+cpu"
    if installed_torch(session) in (None, target):  # --no-install, or already there
        return spec
    # 1. From pip's own configuration (a local wheel, a mirror). Exit status 1 (not found) is
    # expected wherever none is configured: PyPI has no +cpu builds.
    session.install(spec, silent=True, success_codes=[0, 1])
    if installed_torch(session) == target:
        session.log(f"Installed {spec} (CPU build) from pip's configured find-links/indexes")
        return spec
    # 2. From the PyTorch CPU index, probed first: pip would retry an unreachable one for long.
    index = os.environ.get("TIPS_TORCH_INDEX", TORCH_CPU_INDEX).strip()
    session.log(f"No {spec} in pip's configured find-links/indexes: trying {index or '(no index)'}")
    why = index_unreachable(index) if index else "TIPS_TORCH_INDEX is empty"
    if why is None:
        try:  # torch alone from there; its dependencies come with the requirements, as usual
            session.install("--no-deps", "--index-url", index, spec)
            return spec
        except nox.command.CommandFailed:
            why = "pip could not install it from there (its output is above)"
    wheel = f"torch-{target}-cp{sys.version_info.major}{sys.version_info.minor}-*.whl"
    platform = (f"--platform manylinux_2_28_{os.uname().machine} " if sys.platform == "linux" else "")
    session.error(
        f"torch {version}, CPU build: {spec} is not in pip's configured find-links or indexes, "
        f"and the PyTorch CPU index {index or '(none)'} cannot be used: {why}.\n"
        f"Provide the CPU wheel ({wheel}) one of these ways, then run again:\n"
        f"  PIP_FIND_LINKS=/folder/with/the/wheel   e.g. downloaded where the index is reachable with\n"
        f"      pip download --no-deps --only-binary=:all: {platform}"
        f"--python-version {sys.version_info.major}.{sys.version_info.minor} "
        f"--index-url {TORCH_CPU_INDEX} -d /folder/with/the/wheel {spec}\n"
        f"  TIPS_TORCH_INDEX=https://your.mirror/whl/cpu   a mirror of {TORCH_CPU_INDEX}\n"
        f"torch's dependencies (sympy, networkx, jinja2, ...) come from pip's usual index (PyPI)."
    )


def installed_torch(session: nox.Session) -> str | None:
    """The torch version in the session's virtualenv ("" if none; None under ``--no-install``)."""
    out = session.run_install(
        "python", "-c", "import importlib.metadata as m\ntry: print(m.version('torch'))\n"
        "except m.PackageNotFoundError: print()", silent=True, log=False)
    if not isinstance(out, str):
        return None
    lines = out.strip().splitlines()
    return lines[-1].strip() if lines else ""


def index_unreachable(index: str, timeout: float = 10.0) -> str | None:
    """Why the package index ``index`` cannot be reached (None if it answers), in one probe.

    A folder or ``file:`` URL must exist. For http(s) any HTTP answer counts as reachable (pip
    then reports what is wrong), and so does a TLS failure, which pip may not share (it has its
    own certificates); a name that does not resolve, a refused or timed-out connection does not.
    """
    if "://" not in index or index.startswith("file:"):
        path = Path(urllib.request.url2pathname(index.split(":", 1)[1].removeprefix("//"))
                    if index.startswith("file:") else index)
        return None if path.is_dir() else f"{path} is not a folder"
    try:
        with urllib.request.urlopen(index.rstrip("/") + "/torch/", timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as exc:
        if "CERTIFICATE" in str(exc.reason).upper() or "SSL" in type(exc.reason).__name__.upper():
            return None
        return str(exc.reason)
    except OSError as exc:  # e.g. a timeout while reading
        return str(exc) or type(exc).__name__


def sphinx_build(session: nox.Session, *extra: str, out: Path = settings.HTML_DIR,
                 doctrees: Path = settings.DOCTREES_DIR, env: dict[str, str] | None = None) -> None:
    session.run("sphinx-build", *build.sphinx_args(out=out, doctrees=doctrees), *extra, env=env)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the site, executing every changed tip (`-- --clean` re-runs every tip).

    `-- --shard K/N` executes only shard K of N and packs its output for `nox -s docs_merge`.
    After a build, its results go to build/results/ as one result set (tipsite/records/).
    """
    try:
        shard, clean, args = shards.docs_options(session.posargs)  # before anything is deleted
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
                     env={shards.ENV_VAR: f"{k}/{n}", shards.ONLY_VAR: ""})
        session.run("python", "-m", "tipsite.shards", "pack", f"{k}/{n}")
        session.log("Shard built: merge every shard with `nox -s docs_merge`")
        return
    # every tip, whatever the shell says
    sphinx_build(session, *args, env={shards.ENV_VAR: "", shards.ONLY_VAR: ""})
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
    sphinx_build(session, env={shards.ENV_VAR: shards.MERGED, shards.ONLY_VAR: ""})
    session.run("python", "-m", "tipsite.records", "export")
    session.log(f"Merged site built: open {settings.HTML_DIR / 'index.html'}")


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (builds the site once if needed); extra args go to pytest."""
    install(session, "tests.txt")
    # every core; the tests of one built site share a worker (tests/conftest.py)
    parallel = [] if any(a.startswith(("-n", "--numprocesses")) for a in session.posargs) else [
        "-n", "auto", "--dist", "loadgroup"]
    # a hung test fails, naming where it hangs, instead of holding the run (conf/settings.py)
    session.run("pytest", *parallel, *settings.TESTS_TIMEOUT_ARGS, *session.posargs)


@nox.session(default=False)
def gpu_run(session: nox.Session) -> None:
    """The CUDA build of the tips whose CUDA record is not current: `nox -s gpu_run -- rest`.

    The procedure of a lent GPU machine (tipsite/gpurun.py, docs/how_built.rst "CUDA results")
    in a virtualenv with torch's CUDA build (TIPS_TORCH_BUILD=cuda): the self-hosted runner's.
    """
    install(session, "docs.txt")
    session.run("python", "-m", "tipsite.gpurun", *(session.posargs or ["rest"]))


@nox.session(default=False)
@nox.parametrize("torch", list(settings.TORCH_MATRIX))
def matrix(session: nox.Session, torch: str) -> None:
    """Doctests and every tip on one torch release -> docs/_data/compat/torch-<torch>.json."""
    install(session, "matrix.txt", torch, torch_build="any")
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


@nox.session(default=False, venv_backend="none")
def vet(session: nox.Session) -> None:
    """Vet result sets from other machines before they are committed: `nox -s vet -- FILE...`.

    Needs no virtualenv (the checks import no torch) and the git history (each tip's source must
    match a commit of this repository). Without arguments: every contributed set in
    docs/_data/results/ (``contrib-*.json``; CI vets the sets a pull request adds, by name).
    """
    files = session.posargs or [str(p) for p in sorted(records.DATA_DIR.glob(f"{contribute.PREFIX}*.json"))]
    if not files:
        session.log("no contributed result set to vet")
        return
    session.run(sys.executable, "-m", "tipsite.records", "vet", *files, external=True)


@nox.session(default=False)
def new_tip(session: nox.Session) -> None:
    """Start a tip from the template: `nox -s new_tip -- TOPIC tip_name`."""
    install(session, "docs.txt")
    session.run("python", "-m", "tipsite.newtip", *session.posargs)


@nox.session(default=False)
def check(session: nox.Session) -> None:
    """Check your code against the tips' evidence: `nox -s check -- PATH...` (files or folders).

    One line per finding; exit 1 when a finding's tip holds for your torch and device (the others
    are notes). `-- --select/--ignore CODES`, `--fail-on`, `--format json|github`, `--explain CODE`,
    `--torch X.Y`, `--device cpu|cuda`, `--bench` (docs/reference/checker.rst). The same command
    installs on its own: `pip install .` gives `torch-tips`.
    """
    session.install("-r", str(REQ / "check.txt"))
    session.run("python", "-m", "tipsite.checker", *session.posargs)

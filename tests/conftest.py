"""Shared fixtures: the built site (built once per test session) and tiny throwaway builds.

Like sphinx-gallery's own tests, a fixture builds one complete Sphinx project and the tests
assert on the produced HTML. The full site is built with the site's own command line
(:mod:`tipsite.build`) into the same folders as ``nox -s docs``: a test run after a docs build
re-executes nothing, and the extension's fingerprints (:mod:`tipsite.sphinxext.freshness`)
re-run or re-read whatever a change to the hooks or the page layer affects, so the pages the
tests read always reflect the current sources.

Tiny builds copy the committed project ``tests/tinysite/`` to a temporary folder, add the tips
under test and build it the same way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conf import settings  # noqa: E402
from tipsite import build, tipmeta  # noqa: E402

TINYSITE = ROOT / "tests" / "tinysite"


def build_env(**extra: str) -> dict[str, str]:
    """The environment of a test build: this checkout importable, no build knobs from the shell."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TIPS_", "TINYSITE_")) and k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def page_text(html: str) -> str:
    """An HTML page's (or fragment's) text: tags dropped, entities decoded, whitespace collapsed."""
    import html as html_lib
    import re

    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", html)).split())


def pytest_configure(config):
    # the mark is pytest-xdist's; declared here too for runs without it (nox -s matrix's doctests)
    config.addinivalue_line("markers", "xdist_group(name): run in the same pytest-xdist worker")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """With pytest-xdist (``-n``, ``--dist loadgroup``), the tests of one built thing run in one
    worker, so it is built once: every test of the full site, every test of the shard fixture,
    every test of test_contribute.py's reader's set (a module fixture: one per worker otherwise).

    First among the hooks: xdist reads the marks in its own ``pytest_collection_modifyitems``
    (it appends ``@group`` to each test's id); run after it, these marks grouped nothing, and
    two workers each built the shard fixture and one waited 160 s on the site's build lock."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        # html_dir asks for the site at run time (unless TIPS_TEST_HTML names a built one)
        if names & {"site", "html_dir"}:
            item.add_marker(pytest.mark.xdist_group("site"))
        elif "fixture_builds" in names:
            item.add_marker(pytest.mark.xdist_group("shards"))
        elif "fake_cuda_reports" in names:  # one runner process runs them all
            item.add_marker(pytest.mark.xdist_group("fakecuda"))
        elif "contribution" in names:  # its tips run once, not once on each worker
            item.add_marker(pytest.mark.xdist_group("contribute"))
        elif "contributed_all" in names:  # every tip of the gallery, run once
            item.add_marker(pytest.mark.xdist_group("contribute-all"))


@pytest.fixture(scope="session")
def site() -> Path:
    """The full site, built (incrementally) with every tip executed. Returns the HTML folder.

    Builds of the one checkout take turns (a lock file in build/): two at once would race on
    sphinx-gallery's cache files, which is how a worker outside the "site" group once broke it."""
    import fcntl

    settings.BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with open(settings.BUILD_DIR / ".site-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.run(build.sphinx_command(quiet=True), cwd=ROOT, capture_output=True,
                              text=True, env=build_env())
    assert proc.returncode == 0, f"site build failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    return settings.HTML_DIR


@pytest.fixture(scope="session")
def tips() -> list[tipmeta.Tip]:
    return tipmeta.read_all()


@dataclass
class TinyBuild:
    returncode: int
    output: str
    src: Path
    html: Path
    runs: list[int] = field(default_factory=list)

    def page(self, topic: str, name: str) -> str:
        return (self.html / "tips" / topic / f"{name}.html").read_text(encoding="utf-8")


class TinySite:
    """A copy of tests/tinysite in a temporary folder, built as often as a test needs."""

    def __init__(self, root: Path):
        self.root = root
        self.src = root / "src"
        shutil.copytree(TINYSITE, self.src)
        self.html = root / "html"
        self.doctrees = root / "doctrees"

    def write(self, files: dict[str, str]) -> None:
        for rel, text in files.items():
            path = self.src / "gallery" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            readme = path.parent / "README.rst"
            if not readme.exists() and path.parent != self.src / "gallery":
                readme.write_text(f"{path.parent.name}\n{'-' * len(path.parent.name)}\n")
            path.write_text(textwrap.dedent(text) if text.startswith("\n") else text, encoding="utf-8")

    def build(self, timeout: float = 600, in_process: bool = True, **env: str) -> TinyBuild:
        """Build it: in this process (no interpreter, Sphinx or torch to start: about 3 s less a
        build), or in a new one (``in_process=False``) where a test needs a process of its own."""
        if in_process:
            code, output = build_in_process(self.src, self.html, self.doctrees, **env)
            return TinyBuild(code, output, self.src, self.html)
        cmd = build.sphinx_command(src=self.src, out=self.html, doctrees=self.doctrees, quiet=True)
        proc = subprocess.run(cmd, cwd=self.src, capture_output=True, text=True, timeout=timeout,
                              env=build_env(**env))
        return TinyBuild(proc.returncode, proc.stdout + proc.stderr, self.src, self.html)


# What ``warnings.filters`` holds when Python starts (release builds, no -W): pytest changes them.
PYTHON_DEFAULT_FILTERS = (("default", DeprecationWarning, "__main__"), ("ignore", DeprecationWarning, ""),
                          ("ignore", PendingDeprecationWarning, ""), ("ignore", ImportWarning, ""),
                          ("ignore", ResourceWarning, ""))


def build_in_process(src: Path, out: Path, doctrees: Path, **env: str) -> tuple[int, str]:
    """Run ``sphinx-build`` for the project in ``src`` in this process, as the site's command
    line does in its own (:func:`build_env`'s environment); returns its exit status and output.

    Everything a build changes in the process is put back: the environment, the working folder,
    ``sys.path``, the warning filters, the settings a test site's conf.py sets, torch's threads.
    A :class:`SystemExit` (the build's own stop, naming a file and its problem) is its exit status,
    as in a process of its own."""
    import contextlib
    import io
    import warnings

    import torch
    from sphinx.cmd.build import build_main

    from tipsite import records

    saved_env, saved_cwd, saved_path = dict(os.environ), os.getcwd(), list(sys.path)
    saved_filters, saved_threads = list(warnings.filters), torch.get_num_threads()
    saved_settings = (settings.TIPS_THREADS, records.store.DATA_DIR)
    output = io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(build_env(**env))
        os.chdir(src)
        warnings.resetwarnings()  # a fresh interpreter's filters, not pytest's
        for action, category, module in PYTHON_DEFAULT_FILTERS:
            warnings.filterwarnings(action, category=category, module=module, append=True)
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            try:
                code = build_main(build.sphinx_args(src=src, out=out, doctrees=doctrees, quiet=True))
            except SystemExit as exc:
                print(exc)
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        from tipsite import gallery

        gallery.end_reader_runs()  # a tip the build stopped (a time limit) left its conditions
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        warnings.filters[:] = saved_filters
        torch.set_num_threads(saved_threads)
        settings.TIPS_THREADS, records.store.DATA_DIR = saved_settings
    return code, output.getvalue()


@pytest.fixture
def tiny_site(tmp_path: Path) -> TinySite:
    return TinySite(tmp_path)


@pytest.fixture
def tiny_build(tiny_site: TinySite):
    """Build a throwaway site from ``{"topic/tip_name.py": source}``; never raises on failure."""

    def build_it(files: dict[str, str], **env: str) -> TinyBuild:
        tiny_site.write(files)
        return tiny_site.build(**env)

    return build_it


def make_tip(body: str, *, title: str = "A tiny tip", claims: str = '["S4-4"]',
             devices: str = '["cpu"]', kind: str = "behaviour", extra_meta: str = "",
             helpers: tuple[str, ...] = ("decide", "report")) -> str:
    """A complete tip on the contract: docstring, metadata, the helpers' import, then ``body``."""
    quote = 'Claim S4-4, quoted: "Since PyTorch 0.4.0 however, `Tensor` is merged with `Variable`"' \
        if "S4-4" in claims else "A claim from PyTorch's documentation."
    meta = "\n".join([
        f"# sphinx_gallery_tips_claims = {claims}",
        '# sphinx_gallery_tips_tags = ["autograd"]',
        f"# sphinx_gallery_tips_devices = {devices}",
        f'# sphinx_gallery_tips_kind = "{kind}"',
        '# sphinx_gallery_tips_min_torch = "2.0"',
        '# sphinx_gallery_tips_takeaway = "A tiny tip for tests."',
        *([extra_meta] if extra_meta else []),
    ])
    return (f'"""\n{title}\n{"=" * len(title)}\n\n{quote}\n"""\n{meta}\n\n'
            "# %%\n# How this tip measures and decides\n# ---------------------------------\n"
            "# The same helpers in every tip.\n"
            f"from tipsite.tipkit import {', '.join(sorted(helpers))}\n\n\n# %%\n{textwrap.dedent(body)}")


GOOD_BODY = '''\
import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
RULE = "holds if a plain tensor can require grad"
decision = decide("cpu", [("holds", {"requires grad": True}), ("wrong", {})],
                  facts={"requires grad": x.requires_grad})
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {"cpu": decision}, "measurements": [],
          "skipped": []}
'''


@pytest.fixture
def good_tip() -> str:
    return make_tip(GOOD_BODY)

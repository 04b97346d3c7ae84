"""Project settings shared by Sphinx (docs/conf.py), nox (noxfile.py) and the tests.

Everything here is a plain value: nothing depends on what happens to be installed.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = ROOT / "conf"
GALLERY_DIR = ROOT / "gallery"
DOCS_DIR = ROOT / "docs"
# sphinx-gallery writes the executed tips here (inside the Sphinx source tree, git-ignored).
TIPS_OUT_DIR = DOCS_DIR / "tips"
BUILD_DIR = ROOT / "build"
HTML_DIR = BUILD_DIR / "html"
DOCTREES_DIR = BUILD_DIR / "doctrees"
RESULTS_DIR = BUILD_DIR / "results"
# The downloads: every tip with its helpers inlined (tipsite/tipsource.py). sphinx-gallery executes
# and publishes these, so the page, the .py and the .ipynb are the very script the build ran.
DOWNLOADS_DIR = BUILD_DIR / "gallery"

# The torch release the site is built with by default (a CPU wheel on this machine's disk).
TORCH_DEFAULT = "2.13.0"
# Releases the compatibility matrix runs on (oldest first).
TORCH_MATRIX = ("2.5.1", "2.9.1", "2.13.0", "2.14.1")

# Every tip runs with this many intra-op threads during the build, so figures from different
# builds on the same machine compare. The reset hook sets it before each tip.
TIPS_THREADS = 2
TIPS_SEED = 0
# A tip running longer than this stops the build, naming it (the slowest tip takes about 15 s on
# the 2-core development machine). The environment variable TIPS_TIMEOUT overrides it.
TIPS_TIMEOUT_S = 180.0
# A test (its fixtures included) running longer than this fails, and pytest-timeout prints every
# thread's stack: a hung test must fail with its place named, not hold CI until it is killed
# (the slowest, building the full site as a fixture, takes about 4 minutes in a fresh clone).
TESTS_TIMEOUT_S = 1800
TESTS_TIMEOUT_ARGS = ("--timeout", str(TESTS_TIMEOUT_S), "--timeout-method", "signal")
# Printed output a tip's page shows at most; the rest is cut, and the page says so.
TIPS_OUTPUT_MAX_BYTES = 64 * 1024

# Python files under gallery/ that are tips (others, e.g. helpers, are not allowed there).
TIP_GLOB = "tip_*.py"


# The project's repository: the one place its address is set. Every page links to it (the footer),
# "Report a wrong verdict" opens a new issue there with the tip and its record filled in, and the
# page "Contribute your results" names it. The real address is not known to this checkout yet:
# replace OWNER/REPO here once it is published (a build in GitHub Actions, or TIPS_REPO_URL, names
# the repository it runs in instead, see repo_url()).
REPOSITORY_URL = "https://github.com/OWNER/REPO"
REPOSITORY_PLACEHOLDER = "OWNER/REPO"


def repo_url() -> str:
    """The project's repository: ``TIPS_REPO_URL``, or the repository a GitHub Actions build runs
    in, or :data:`REPOSITORY_URL`."""
    url = os.environ.get("TIPS_REPO_URL")
    if url:
        return url.rstrip("/")
    server, repo = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_REPOSITORY")
    return f"{server}/{repo}" if server and repo else REPOSITORY_URL


def repo_is_placeholder() -> bool:
    """Whether the address is still :data:`REPOSITORY_URL`'s placeholder (pages say so)."""
    return REPOSITORY_PLACEHOLDER in repo_url()

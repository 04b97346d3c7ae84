"""Shared fixtures: the built site (built once per test session) and tiny throwaway builds.

Like sphinx-gallery's own tests, a fixture builds one complete Sphinx project and the tests
assert on the produced HTML. The full site is built with the same command as ``nox -s docs``,
into the same folders, so a test run after a docs build re-executes nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conf import settings  # noqa: E402
from tipsite import tipmeta  # noqa: E402


def sphinx_cmd(src: Path, out: Path, doctrees: Path) -> list[str]:
    return [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q",
            "-d", str(doctrees), str(src), str(out)]


@pytest.fixture(scope="session")
def site() -> Path:
    """The full site, built (incrementally) with every tip executed. Returns the HTML folder."""
    proc = subprocess.run(
        sphinx_cmd(settings.DOCS_DIR, settings.HTML_DIR, settings.DOCTREES_DIR),
        cwd=ROOT, capture_output=True, text=True,
    )
    assert proc.returncode == 0, f"site build failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    return settings.HTML_DIR


@pytest.fixture(scope="session")
def tips() -> list[tipmeta.Tip]:
    return tipmeta.read_all()


TINY_CONF = """
import sys
sys.path.insert(0, {root!r})
sys.path.insert(0, {ext!r})
from tipsite import gallery

extensions = ["sphinx_gallery.gen_gallery", "tips_pages"]
sphinx_gallery_conf = gallery.gallery_conf("gallery", "tips")
html_theme = "furo"
html_static_path = []
exclude_patterns = ["_build", "gallery"]
"""

TINY_INDEX = """
Tiny
====

.. toctree::

   tips/index
   generated/claims
"""


@dataclass
class TinyBuild:
    returncode: int
    output: str
    html: Path


@pytest.fixture
def tiny_build(tmp_path: Path):
    """Build a throwaway site from ``{"topic/tip_name.py": source}``; never raises on failure."""

    def build(files: dict[str, str]) -> TinyBuild:
        src = tmp_path / "src"
        (src / "gallery").mkdir(parents=True)
        (src / "conf.py").write_text(TINY_CONF.format(root=str(ROOT), ext=str(ROOT / "docs" / "_ext")))
        (src / "index.rst").write_text(TINY_INDEX)
        (src / "gallery" / "README.rst").write_text("Tips\n====\n")
        for rel, text in files.items():
            path = src / "gallery" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            readme = path.parent / "README.rst"
            if not readme.exists():
                readme.write_text(f"{path.parent.name}\n{'-' * len(path.parent.name)}\n")
            path.write_text(textwrap.dedent(text))
        out = tmp_path / "html"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        proc = subprocess.run(sphinx_cmd(src, out, tmp_path / "doctrees"), cwd=src,
                              capture_output=True, text=True, env=env)
        return TinyBuild(proc.returncode, proc.stdout + proc.stderr, out)

    return build


GOOD_TIP = '''\
"""
A tiny tip
==========

Claim S4-4, quoted: "Since PyTorch 0.4.0 however, `Tensor` is merged with `Variable`"
"""
# sphinx_gallery_tips_claims = ["S4-4"]
# sphinx_gallery_tips_tags = ["autograd"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "A tiny tip for tests."

# %%
import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
verdict = "holds" if x.requires_grad else "wrong"
print(f"Verdict: {verdict}")
RESULT = {"verdict": verdict, "rule": "holds if a plain tensor can require grad",
          "key": None, "measurements": [], "skipped": []}
'''


@pytest.fixture
def good_tip() -> str:
    return GOOD_TIP

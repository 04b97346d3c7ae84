"""Sphinx configuration for the PyTorch tips knowledge base.

Shared settings live in the ``conf`` package at the repository root. Sphinx executes this file
as a module named ``conf`` too, so the repository root goes first on ``sys.path`` and the import
below is checked to be the package, not this file.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import conf as _conf_pkg  # noqa: E402

if Path(_conf_pkg.__file__).resolve() != (ROOT / "conf" / "__init__.py").resolve():
    raise RuntimeError(f"imported {_conf_pkg.__file__} instead of the conf/ package")

from conf import settings  # noqa: E402
from tipsite import gallery, shards  # noqa: E402

project = "PyTorch tips, measured"
author = "The PyTorch tips knowledge base authors"
copyright = "2026, " + author

extensions = [
    "sphinx_gallery.gen_gallery",
    "sphinx_copybutton",
    "tipsite.sphinxext",
]

# Links from tip pages and their code to PyTorch's API pages need PyTorch's inventory from the
# network, so they are opt-in: TIPS_INTERSPHINX=1. By default the build stays offline.
if os.environ.get("TIPS_INTERSPHINX") == "1":
    extensions.append("sphinx.ext.intersphinx")
    intersphinx_mapping = {
        "torch": ("https://docs.pytorch.org/docs/stable/", None),
        "python": ("https://docs.python.org/3/", None),
        "numpy": ("https://numpy.org/doc/stable/", None),
    }

# Paths are relative to this directory: ../gallery holds the tips, tips/ receives the pages.
# TIPS_SHARD=K/N executes only shard K's tips; TIPS_SHARD=merged executes none (conf/shards.py).
sphinx_gallery_conf = gallery.gallery_conf(
    "../gallery", settings.TIPS_OUT_DIR.name,
    filename_pattern=shards.filename_pattern(settings.GALLERY_DIR))

exclude_patterns = ["_build", "**.ipynb_checkpoints", "tips/**/*.md5"]
templates_path = ["_templates"]
html_static_path = ["_static"]
html_theme = "furo"
html_title = project
html_show_sourcelink = False

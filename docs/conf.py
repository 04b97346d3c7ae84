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

# API names on tip pages link to PyTorch's documentation through intersphinx. By default the
# build stays offline and reads the inventory committed in _data/torch-objects.inv (see
# tipsite/sphinxext/apis.py); TIPS_INTERSPHINX=1 fetches the current inventories first (PyTorch,
# Python, NumPy) and falls back to the committed copy when the network fails. Without either, a
# name is shown as code without a link: nothing fails.
TORCH_DOCS = "https://docs.pytorch.org/docs/stable/"
TORCH_INVENTORY = Path(__file__).parent / "_data" / "torch-objects.inv"
extensions.append("sphinx.ext.intersphinx")
intersphinx_mapping = {}
if os.environ.get("TIPS_INTERSPHINX") == "1":
    intersphinx_mapping = {
        "torch": (TORCH_DOCS, (None, str(TORCH_INVENTORY)) if TORCH_INVENTORY.exists() else None),
        "python": ("https://docs.python.org/3/", None),
        "numpy": ("https://numpy.org/doc/stable/", None),
    }
elif TORCH_INVENTORY.exists():
    intersphinx_mapping = {"torch": (TORCH_DOCS, str(TORCH_INVENTORY))}
intersphinx_timeout = 10
# Intersphinx links only explicit roles (the pages' API names), never a missing local reference.
intersphinx_disabled_reftypes = ["std:doc"]

# ../gallery holds the tips as written; sphinx-gallery executes and publishes their downloads
# (helpers inlined, tipsite/tipsource.py), which the extension writes to build/gallery first; tips/
# receives the pages. TIPS_SHARD=K/N executes only shard K's tips; TIPS_SHARD=merged executes none
# (tipsite/shards.py).
tips_gallery_source = str(settings.GALLERY_DIR)
sphinx_gallery_conf = gallery.gallery_conf(
    settings.DOWNLOADS_DIR, settings.TIPS_OUT_DIR.name,
    filename_pattern=shards.filename_pattern(settings.GALLERY_DIR))

exclude_patterns = ["_build", "**.ipynb_checkpoints", "tips/**/*.md5"]
templates_path = ["_templates"]
html_static_path = ["_static"]
html_theme = "furo"
html_title = project
html_show_sourcelink = False
html_favicon = "_static/favicon.svg"

# Copying an example drops its prompts: ">>> " and "... " of doctests, "$ " of shell lines; when
# a block has prompts, only the prompted lines are copied (not the printed output).
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = True

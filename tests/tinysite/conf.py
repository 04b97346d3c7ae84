"""A tiny site for the tests: the real extension over a throwaway gallery.

``tests/conftest.py`` copies this folder to a temporary directory, writes the tips under test into
``gallery/<topic>/`` and builds it with the site's own command line (:mod:`tipsite.build`).
``TINYSITE_THREADS`` sets the build's thread count (for a second, different result set).
"""

import os
import sys
from pathlib import Path

import tipsite

# Sphinx runs this file with its folder first on sys.path: put the repository first so that
# ``conf`` is the configuration package, not this file.
sys.path.insert(0, str(Path(tipsite.__file__).resolve().parents[1]))

from conf import settings  # noqa: E402
from tipsite import gallery, records, shards  # noqa: E402

settings.TIPS_THREADS = int(os.environ.get("TINYSITE_THREADS", settings.TIPS_THREADS))
# This throwaway site has no committed result sets of its own: the site's (docs/_data/results)
# hold CUDA runs of the real tips, which would fill in the pages of their copies here. A test
# gives a set explicitly (TIPS_RESULT_SETS) when it wants one.
records.store.DATA_DIR = Path(__file__).parent / "_data" / "results"

project = "Tiny tips"
extensions = ["sphinx_gallery.gen_gallery", "tipsite.sphinxext"]
tips_gallery_source = "gallery"
# sphinx-gallery runs the downloads (helpers inlined), which the extension writes to _downloads.
sphinx_gallery_conf = gallery.gallery_conf(
    "_downloads", "tips", filename_pattern=shards.filename_pattern(Path(__file__).parent / "gallery"))
html_theme = "furo"
exclude_patterns = ["_build", "gallery", "_downloads"]

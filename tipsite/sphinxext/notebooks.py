"""Notebooks that read like the page: no empty cell, quoted passages as quotes.

sphinx-gallery writes each tip's notebook while it runs the tip. Two things come out wrong for
these tips: the metadata comments below the docstring leave an empty first code cell, and the
claim the docstring quotes (an indented reST block quote) becomes an indented Markdown block,
which Jupyter shows as code. :func:`fix_notebooks` (builder-inited, after sphinx-gallery) mends
each notebook in place and rebuilds the zips that contain notebooks, so the downloads match.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

from sphinx.application import Sphinx

from tipsite.sphinxext import state


def fix_markdown(text: str) -> str:
    """An indented block that opens with a quotation mark becomes a Markdown block quote; the
    rest of its indentation (e.g. code inside the quote) is kept inside the quote."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        starts_quote = (line.startswith("    ") and line.strip()[:1] in ('"', "\u201c")
                        and (i == 0 or not lines[i - 1].strip()))
        if not starts_quote:
            out.append(line)
            i += 1
            continue
        while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
            if not lines[i].strip() and (i + 1 >= len(lines) or not lines[i + 1].startswith("    ")):
                break
            out.append("> " + lines[i][4:] if lines[i].strip() else ">")
            i += 1
    return "\n".join(out)


def fix_notebook(nb: dict) -> dict:
    cells = []
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code" and not source.strip():
            continue
        if cell["cell_type"] == "markdown":
            fixed = fix_markdown(source)
            if fixed != source:
                cell = {**cell, "source": fixed}
        cells.append(cell)
    return {**nb, "cells": cells}


def _rezip(zip_path: Path, members: list[Path]) -> None:
    tmp = zip_path.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for member in members:
            zf.write(member, member.name)
    tmp.replace(zip_path)


def fix_notebooks(app: Sphinx) -> None:
    """builder-inited, after sphinx-gallery: mend every tip notebook and the zips holding them."""
    _, out = state.gallery_dirs(app)
    changed = False
    for path in sorted(out.glob("*/tip_*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        fixed = fix_notebook(nb)
        if fixed == nb:
            continue
        path.write_text(json.dumps(fixed, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        changed = True
        script = path.with_suffix(".py")
        if path.with_suffix(".zip").exists() and script.exists():
            _rezip(path.with_suffix(".zip"), [script, path])
    every = out / f"{out.name}_jupyter.zip"
    if changed and every.exists():
        with zipfile.ZipFile(every) as zf:
            names = zf.namelist()
        members = [p for p in out.rglob("*.ipynb") if re.sub(r".*/", "", str(p)) in
                   {re.sub(r".*/", "", n) for n in names}]
        _rezip(every, sorted(members))

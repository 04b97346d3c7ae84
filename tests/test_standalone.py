"""Every tip runs as a reader runs the download: a lone file, plain python, no project code; and
every notebook holds the same code, runs, and reads like the page."""

from __future__ import annotations

import ast
import json

import pytest

from conf import settings
from tipsite import records, tipcheck, tipmeta

TIPS = tipmeta.tip_files()


@pytest.mark.parametrize("path", TIPS, ids=lambda p: p.stem)
def test_script_runs_on_its_own(path):
    """A lone copy of the tip, plain python, through tipsite/tiprunner.py with ``--strict``: a
    deprecation warning raised by the tip's code fails it (the site never teaches a deprecated
    API), so does a ``torch.cuda`` call that answers silently without CUDA, and an import of a
    package a reader does not have. Its RESULT must be valid and decide the devices this
    machine must."""
    problems, report = tipcheck.check(path)
    assert not problems, f"{path.name}:\n" + "\n".join(problems) + "\n" + (report or {}).get("stderr", "")[-3000:]
    assert str(settings.ROOT) not in report["stdout"], "the project's own code was importable"


def _notebook(path):
    import nbformat

    return nbformat.read(settings.TIPS_OUT_DIR / path.parent.name / f"{path.stem}.ipynb", as_version=4)


def _code_of_script(path) -> str:
    """The tip's statements, comments and metadata dropped, as the notebook should hold them."""
    return ast.unparse(ast.parse(path.read_text(encoding="utf-8")).body[1:])


@pytest.mark.parametrize("path", TIPS, ids=lambda p: p.stem)
def test_notebook_holds_the_script_s_code_and_no_empty_cell(site, path):
    nb = _notebook(path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.source.strip() for c in code), f"{path.stem}.ipynb has an empty code cell"
    joined = "\n".join(c.source for c in code)
    assert ast.unparse(ast.parse(joined)) == _code_of_script(path), f"{path.stem}.ipynb differs from the script"
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for line in markdown.splitlines():
        assert not (line.startswith("    ") and line.strip().startswith(('"', "\u201c"))), (
            f"{path.stem}.ipynb shows a quoted passage as code: {line!r}")


# Executing every notebook would run every tip a third time; the notebooks hold the scripts'
# code (above), so executing a sample shows the notebook form itself works: the fastest tip of
# each kind.
def _sample() -> list:
    timings = json.loads((settings.CONF_DIR / "timings.json").read_text())["seconds"]
    picks = {}
    for path in TIPS:
        kind = tipmeta.read_tip(path).kind
        if kind not in picks or timings.get(path.stem, 99) < timings.get(picks[kind].stem, 99):
            picks[kind] = path
    return sorted(picks.values())


@pytest.mark.parametrize("path", _sample(), ids=lambda p: p.stem)
def test_notebook_executes(site, path, tmp_path):
    from nbclient import NotebookClient

    nb = _notebook(path)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "Verdict on " in outputs or not records.required_devices(tipmeta.read_tip(path).devices, {"cpu"})

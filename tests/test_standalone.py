"""Every tip's download runs as a reader runs it, and the suite runs no tip again to show it.

The build executes each tip's download (its helpers inlined, tipsite/tipsource.py), the very file
the page offers, under a reader's conditions (tipsite/tiprunner.py ``ReaderConditions``): a
package a reader lacks cannot be imported, a ``torch.cuda`` call that answers silently without
CUDA raises, and every warning the run raises is recorded with whose it is. The tests below read
that run from the site's records; the tiny builds show each condition failing a build or a tip.
"""

from __future__ import annotations

import ast
import hashlib
import sys

import pytest
from conftest import GOOD_BODY, make_tip

from conf import settings
from tipsite import records, tipmeta, tiprunner

TIPS = tipmeta.tip_files()


def _record(path):
    return records.read_record(settings.TIPS_OUT_DIR / path.parent.name / path.name)


@pytest.mark.parametrize("path", TIPS, ids=lambda p: p.stem)
def test_the_build_ran_the_download_as_a_reader_runs_it(site, path):
    """The record of the build's run: the file that ran is the download the page offers, and the
    tip's own code raised no deprecation warning (the site never teaches a deprecated API on the
    torch it is built with; a tip demonstrating one catches it)."""
    record = _record(path)
    assert record is not None, f"{path.stem}: the build left no record"
    assert "warnings" in record, f"{path.stem}: the build did not run it under a reader's conditions"
    bad = tiprunner.offending(record["warnings"])
    assert not bad, f"{path.name}: " + tiprunner.deprecation_error(record["warnings"], record["torch"])
    downloads = list(site.glob(f"_downloads/*/{path.name}"))
    assert downloads, f"{path.stem}: the page offers no .py download"
    assert {hashlib.sha256(d.read_bytes()).hexdigest() for d in downloads} == {record["source_sha256"]}, (
        f"{path.stem}: the download readers get is not the file the build ran")


def _notebook(path):
    import nbformat

    return nbformat.read(settings.TIPS_OUT_DIR / path.parent.name / f"{path.stem}.ipynb", as_version=4)


def _code_of_script(text: str) -> str:
    """The script's statements, its docstring, comments and metadata dropped, as a notebook holds them."""
    return ast.unparse(ast.parse(text).body[1:])


@pytest.mark.parametrize("path", TIPS, ids=lambda p: p.stem)
def test_notebook_holds_the_download_s_code_and_no_empty_cell(site, path):
    """The notebook is the code the build ran, cell by cell (so it runs as the script did)."""
    nb = _notebook(path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.source.strip() for c in code), f"{path.stem}.ipynb has an empty code cell"
    joined = "\n".join(c.source for c in code)
    ran = (settings.TIPS_OUT_DIR / path.parent.name / path.name).read_text(encoding="utf-8")
    assert ast.unparse(ast.parse(joined)) == _code_of_script(ran), f"{path.stem}.ipynb differs from the download"
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for line in markdown.splitlines():
        assert not (line.startswith("    ") and line.strip().startswith(('"', "\u201c"))), (
            f"{path.stem}.ipynb shows a quoted passage as code: {line!r}")


# --- each reader's condition, shown failing a tiny build ------------------------------------------

def test_a_tip_importing_what_a_reader_lacks_fails_the_build(tiny_build):
    """The build's own environment has jinja2 (Sphinx needs it); a reader's download does not."""
    result = tiny_build({"correctness/tip_tiny.py": make_tip("import jinja2\n" + GOOD_BODY)})
    assert result.returncode != 0
    assert "imports 'jinja2', which a reader who downloads it may not have" in result.output


def test_a_silent_cuda_call_fails_the_build_on_a_cpu_machine(tiny_build):
    """Without CUDA, torch.cuda.memory_allocated() answers 0: a tip must ask is_available() first."""
    body = GOOD_BODY.replace("import torch\n", "import torch\n\nprint(torch.cuda.memory_allocated())\n")
    result = tiny_build({"correctness/tip_tiny.py": make_tip(body)})
    assert result.returncode != 0
    assert "torch.cuda.memory_allocated() called on a machine without CUDA" in result.output


def test_a_deprecated_api_is_recorded_as_the_tip_s_and_the_page_shows_what_it_showed(tiny_site):
    """A deprecation raised on the tip's behalf is recorded (the test above fails such a tip);
    one raised inside another module that Python's filters hide stays off the page, as before."""
    body = GOOD_BODY.replace("import torch\n", "import torch\nimport warnings\n\n"
                             "storage = torch.ones(2).storage()\n"
                             "exec(compile('warnings.warn(\"old\", DeprecationWarning)', 'lib.py', 'exec'),\n"
                             "     {'warnings': warnings, '__name__': 'lib'})\n")
    tiny_site.write({"correctness/tip_tiny.py": make_tip(body)})
    result = tiny_site.build()
    assert result.returncode == 0, result.output[-3000:]
    record = records.read_record(tiny_site.src / "tips" / "correctness" / "tip_tiny.py")
    bad = tiprunner.offending(record["warnings"])
    assert [w["message"][:30] for w in bad] == ["TypedStorage is deprecated. It"]
    assert any(w["message"] == "old" and w["origin"] == "other" for w in record["warnings"])
    page = result.page("correctness", "tip_tiny")
    assert "TypedStorage is deprecated" in page and "DeprecationWarning: old" not in page


def test_a_tiny_tip_s_notebook_runs(tiny_site, tmp_path):
    """The notebook form itself works: the build's notebook of a tiny tip runs in a kernel (the
    site's notebooks hold the very code their builds ran, above)."""
    from nbclient import NotebookClient

    tiny_site.write({"correctness/tip_tiny.py": make_tip(GOOD_BODY)})
    assert tiny_site.build().returncode == 0
    import nbformat

    nb = nbformat.read(tiny_site.src / "tips" / "correctness" / "tip_tiny.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "Verdict on CPU: holds" in outputs


def test_warnings_the_host_hides_are_found_with_python_s_own_filter_matching():
    """CPython's default filters hold their module as a plain string ('__main__'), matched
    exactly; filterwarnings() adds compiled patterns. Both are read as Python reads them."""
    import re
    import warnings

    defaults = [("default", None, DeprecationWarning, "__main__", 0), ("ignore", None, DeprecationWarning, None, 0)]
    assert tiprunner._action(defaults, DeprecationWarning, "old", "__main__", 3) == "default"
    assert tiprunner._action(defaults, DeprecationWarning, "old", "lib", 3) == "ignore"
    assert tiprunner._action(defaults, UserWarning, "old", "lib", 3) == "default"
    compiled = [("error", re.compile("boom", re.I), Warning, re.compile(r"torch\."), 0)]
    assert tiprunner._action(compiled, UserWarning, "Boom here", "torch.nn", 1) == "error"
    assert tiprunner._action(compiled, UserWarning, "Boom here", "numpy", 1) == "default"
    with warnings.catch_warnings():
        warnings.resetwarnings()
        warnings.filterwarnings("ignore", message="quiet", module="lib")
        assert tiprunner._action(warnings.filters, UserWarning, "quiet please", "lib", 1) == "ignore"


def test_the_import_check_costs_torch_s_own_imports_almost_nothing(monkeypatch, tmp_path):
    """torch runs tens of thousands of import statements inside its functions while a tip times
    them (66,299 in tip_track_metrics): resolving the caller's path on each one (a realpath, ~5 us)
    shifted that tip's key figure by a fifth. The check resolves each code file once."""
    import os

    tip = tmp_path / "tip_x.py"
    tip.write_text("x = 1\n")
    calls = []
    real = os.path.realpath
    monkeypatch.setattr(tiprunner.os.path, "realpath", lambda p: calls.append(p) or real(p))
    conditions = tiprunner.ReaderConditions(str(tip), strict=False)
    conditions.start()
    try:
        for _ in range(1000):
            import json  # noqa: F401  (a statement run from this file, as torch's own are)
    finally:
        conditions.stop()
    assert calls.count(__file__) == 1  # once: the hook ran, and remembered the answer


def test_the_runner_refuses_a_package_a_reader_lacks_even_when_an_earlier_tip_imported_it(tmp_path, monkeypatch):
    """Several tips run in one process: a module an earlier tip (or the host) imported is never
    looked up by a finder again, so the check sits on the import statement; a module imported
    through importlib, not yet imported, is refused by the finder."""
    installed = tmp_path / "site-packages"
    for name in ("zz_reader_lacks", "zz_reader_lacks_too"):
        (installed / name).mkdir(parents=True)
        (installed / name / "__init__.py").write_text("")
    # second on the path: the runner sets sys.path[0] to the tip's folder, as python would
    monkeypatch.setattr(sys, "path", [sys.path[0], str(installed), *sys.path[1:]])
    import zz_reader_lacks  # noqa: F401  (an earlier tip's import, as far as sys.modules knows)

    statement, dynamic = tmp_path / "tip_statement.py", tmp_path / "tip_dynamic.py"
    statement.write_text("import zz_reader_lacks\nRESULT = {}\n")
    dynamic.write_text("import importlib\nimportlib.import_module('zz_reader_lacks_too')\nRESULT = {}\n")
    for tip, name in ((statement, "zz_reader_lacks"), (dynamic, "zz_reader_lacks_too")):
        report = tiprunner.run(str(tip), strict=True)
        assert report["status"] == "failed", tip.name
        assert f"imports {name!r}, which a reader who downloads it may not have" in report["error"]
        assert tiprunner.run(str(tip), strict=False)["status"] == "passed"
        sys.modules.pop("zz_reader_lacks_too", None)

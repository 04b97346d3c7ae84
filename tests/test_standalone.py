"""Every tip runs as a reader runs the download: a lone file, plain python, no project code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conf import settings
from tipsite import tipmeta


def reader_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TIPS_"))}
    env["MPLBACKEND"] = "Agg"
    return env


@pytest.mark.parametrize("path", tipmeta.tip_files(), ids=lambda p: p.stem)
def test_script_runs_on_its_own(path, tmp_path):
    """A lone copy of the tip, plain python, through conf/tiprunner.py (standard library only:
    it runs the tip as ``__main__`` and records its warnings). ``--strict``: a deprecation
    warning raised by the tip's code or by torch on its behalf fails the tip, so the site never
    teaches a deprecated API; a tip that demonstrates one catches the warning itself."""
    script = tmp_path / path.name
    shutil.copy(path, script)
    shutil.copy(settings.CONF_DIR / "tiprunner.py", tmp_path / "tiprunner.py")
    proc = subprocess.run([sys.executable, "tiprunner.py", "--strict", "--json", "report.json", script.name],
                          cwd=tmp_path, env=reader_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode != 3, f"{path.name} teaches a deprecated API:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"{path.name} failed on its own:\n{proc.stderr[-4000:]}"
    assert "Verdict: " in proc.stdout, f"{path.name} printed no verdict"
    # the project's own code must not have been importable
    assert str(settings.ROOT) not in proc.stdout


@pytest.mark.parametrize("path", tipmeta.tip_files(), ids=lambda p: p.stem)
def test_notebook_executes(site, path, tmp_path):
    import nbformat
    from nbclient import NotebookClient

    notebook = settings.TIPS_OUT_DIR / path.parent.name / f"{path.stem}.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "Verdict: " in outputs, f"{notebook.name} printed no verdict"

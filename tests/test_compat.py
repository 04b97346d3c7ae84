"""The compatibility matrix: the tip runner's warning rules and the page's cells.

Deprecation warnings raised by a tip's code are errors (the site never teaches a deprecated
API); a tip that demonstrates one catches it itself; warnings from other packages or from
torch's own imports are recorded, never held against the tip. The compat page shows missing
runs as missing and too-new tips as not applicable.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from conf import settings
from tipsite import compat, tipmeta

sys.path.insert(0, str(settings.DOCS_DIR / "_ext"))
import tips_compat  # noqa: E402

TAIL = '''
print("Verdict: holds")
RESULT = {"verdict": "holds", "rule": "r", "key": None, "measurements": [], "skipped": []}
'''

CASES = {
    # a deprecated torch API, called unguarded: the runner fails the tip under --strict
    "deprecated_unguarded": ("import torch\ntorch.cuda.amp.GradScaler(enabled=False)\n", 3),
    # the same API demonstrated inside the tip's own catch_warnings: fine
    "deprecated_caught": (textwrap.dedent("""\
        import warnings
        import torch
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.amp.GradScaler(enabled=False)
        assert any(issubclass(w.category, FutureWarning) for w in caught)
        """), 0),
    # a third-party module's own deprecation, attributed to the tip's line: recorded, not an error
    "third_party": (textwrap.dedent("""\
        import torch
        import thirdparty
        thirdparty.old()
        """), 0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_runner_holds_only_the_tips_deprecations_against_it(tmp_path, case):
    source, expected = CASES[case]
    (tmp_path / "thirdparty.py").write_text(
        "import warnings\n\ndef old():\n"
        "    warnings.warn('old() is deprecated', DeprecationWarning, stacklevel=2)\n")
    (tmp_path / "tip_case.py").write_text(source + TAIL)
    shutil.copy(compat.RUNNER, tmp_path / compat.RUNNER.name)
    proc = subprocess.run([sys.executable, compat.RUNNER.name, "--strict", "--json", "r.json", "tip_case.py"],
                          cwd=tmp_path, env=compat.reader_env(), capture_output=True, text=True, timeout=300)
    report = json.loads((tmp_path / "r.json").read_text())
    assert proc.returncode == expected, proc.stderr[-3000:]
    assert report["verdict"] == "holds" and report["torch"]
    tips_deprecations = [w for w in report["warnings"] if w["deprecation"] and w["origin"] == "tip"]
    if case == "deprecated_unguarded":
        assert report["status"] == "failed" and "GradScaler" in report["error"]
        assert tips_deprecations and tips_deprecations[0]["where"] == "tip_case.py:2"
    else:
        assert report["status"] == "passed" and not tips_deprecations
    if case == "third_party":
        assert any(w["origin"] == "other" and "old()" in w["message"] for w in report["warnings"])


def _tip(min_torch: str = "2.0") -> tipmeta.Tip:
    return tipmeta.Tip(path=settings.GALLERY_DIR / "speed" / "tip_fake.py", title="Fake", claims=(),
                       tags=("autograd",), devices=("cpu",), kind="speed", min_torch=min_torch,
                       takeaway="t")


def test_compat_cells_never_fill_in_missing_runs():
    run = {"date": "2026-01-01 00:00 UTC", "tips": {
        "tip_fake": {"status": "passed", "verdict": "holds", "date": "2026-01-01 00:00 UTC",
                     "key": {"name": "speed-up", "value": 1.234, "unit": "x"}, "warnings": [], "deprecations": 0}}}
    table = "\n".join(tips_compat.table_rst([_tip()], {"2.5.1": None, "2.9.1": {"tips": {}}, "2.13.0": run}))
    cells = table.split("tip_fake`` · since torch 2.0", 1)[1]
    assert cells.count("*missing*") == 2  # no file for 2.5.1; no entry for the tip in 2.9.1
    assert "✓ passed :tip-verdict:`holds`" in cells and "| **1.23** x" in cells
    assert "key figure: speed-up" in table


def test_compat_cells_show_not_applicable_and_failures():
    run = {"date": "d", "tips": {"tip_fake": {"status": "not applicable", "min_torch": "2.6", "date": "d"}}}
    assert tips_compat.cell_lines(run["tips"]["tip_fake"], run) == ["not applicable (needs torch ≥ 2.6)"]
    failed = {"status": "failed", "verdict": None, "date": "d", "warnings": [{"deprecation": True}],
              "deprecations": 1, "error": "Traceback ...\nRuntimeError: boom"}
    lines = tips_compat.cell_lines(failed, run)
    assert lines[0] == "✗ **failed**" and "| ⚠ 1 deprecation warning" in lines
    assert any("RuntimeError: boom" in ln for ln in lines)
    passed = {"status": "passed", "verdict": "holds", "date": "d", "sha256": "old"}
    assert any("stale" in ln for ln in tips_compat.cell_lines(passed, run, current_sha="new"))
    assert not any("stale" in ln for ln in tips_compat.cell_lines(passed, run, current_sha="old"))


def test_min_torch_decides_applicability():
    assert compat.applies(_tip("2.5"), "2.5.1") and not compat.applies(_tip("2.6"), "2.5.1")
    assert compat.applies(_tip("1.9"), settings.TORCH_MATRIX[0])


@pytest.mark.parametrize("release", settings.TORCH_MATRIX)
def test_recorded_runs_are_well_formed(release):
    run = compat.load(release)
    if run is None:
        pytest.skip(f"no recorded run for torch {release} (the page shows it as missing)")
    assert run["torch"] == release and run["torch_build"].split("+")[0] == release
    assert run["strict_deprecations"] == (release == settings.TORCH_MATRIX[-1])
    for name, entry in run["tips"].items():
        assert entry["status"] in (compat.PASSED, compat.FAILED, compat.NOT_APPLICABLE), name
        if entry["status"] == compat.PASSED:
            assert entry["verdict"] in tipmeta.vocab()["verdicts"], name

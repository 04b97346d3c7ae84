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
from tipsite import compat, records, tipmeta
from tipsite.sphinxext import compat as tips_compat

TAIL = '''
print("Verdict on CPU: holds")
RESULT = {"rule": "r", "verdicts": {"cpu": {"verdict": "holds", "key": None}}, "measurements": [], "skipped": []}
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
    assert report["verdicts"]["cpu"]["verdict"] == "holds" and report["torch"]
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


def _render(part, tips, runs):
    return tips_compat.render_part(part, tips, runs, settings.BUILD_DIR)


def _host(flags=("avx2",)):
    return {"cpu": {"name": "AMD EPYC", "flags": list(flags), "cores": 2, "capability": "AVX2"}}


def test_compat_cells_never_fill_in_missing_runs():
    run = {"date": "2026-01-01 00:00 UTC", "tips": {
        "tip_fake": {"status": "passed", "date": "2026-01-01 00:00 UTC", "warnings": [], "deprecations": 0,
                     "verdicts": {"cpu": {"verdict": "holds",
                                          "key": {"name": "speed-up", "value": 1.234, "unit": "x"}}}}}}
    table = _render("table", [_tip()], {"2.5.1": None, "2.9.1": {"tips": {}}, "2.13.0": run})
    cells = table.split("tip_fake`` · since torch 2\\.0", 1)[1]
    assert cells.count("*missing*") == 2  # no file for 2.5.1; no entry for the tip in 2.9.1
    assert "✓ passed CPU :tip-verdict:`holds`" in cells and "| **1\\.23x**" in cells
    assert "key figure: speed\\-up" in table


def test_compat_cells_show_not_applicable_and_failures():
    run = {"date": "d", "tips": {"tip_fake": {"status": "not applicable", "min_torch": "2.6", "date": "d"}}}
    c = tips_compat.cell(run["tips"]["tip_fake"], run)
    assert c["kind"] == "not applicable" and c["min_torch"] == "2.6"
    assert "not applicable (needs torch ≥ 2\\.6)" in _render("table", [_tip()], {"2.5.1": run})
    failed = {"status": "failed", "verdicts": {}, "date": "d", "warnings": [{"deprecation": True}],
              "deprecations": 1, "error": "Traceback ...\nRuntimeError: boom"}
    c = tips_compat.cell(failed, run)
    assert c["kind"] == "failed" and c["deprecations"] == 1 and c["reason"] == "RuntimeError: boom"
    old = {"code_sha256": "a" * 64, "helpers_sha256": "b" * 64}
    passed = {"status": "passed", "verdicts": {"cpu": {"verdict": "holds"}}, "date": "d", **old}
    assert tips_compat.cell(passed, run, {**old, "code_sha256": "c" * 64})["older"]
    assert tips_compat.cell(passed, run, {**old, "helpers_sha256": "c" * 64})["older"]
    assert not tips_compat.cell(passed, run, old)["older"]
    text = _render("table", [_tip()], {"2.13.0": {**run, "tips": {"tip_fake": failed}}})
    assert "✗ **failed**" in text and "| ⚠ 1 deprecation warning" in text and "RuntimeError\\: boom" in text


def test_releases_compare_only_within_one_machine_class_and_the_class_is_named():
    """Runs from a CPU without the features (or without recorded features) are never put in one
    table with runs of another class: each table names its class, unknown ones say so."""
    entry = {"status": "passed", "date": "d", "warnings": [],
             "verdicts": {"cpu": {"verdict": "holds", "key": {"name": "speed-up", "value": 1.8, "unit": "x"}}}}
    runs = {"2.5.1": {"device": "cpu", "device_name": "AMD EPYC", "tips": {"tip_fake": entry}},
            "2.9.1": {"device": "cpu", "hosts": _host(), "tips": {"tip_fake": entry}},
            "2.13.0": {"device": "cpu", "hosts": _host(("avx2", "avx512f", "avx512_bf16")),
                       "tips": {"tip_fake": {**entry, "verdicts": {"cpu": {"verdict": "wrong", "key": None}}}}}}
    groups = tips_compat.classes(runs)
    assert [g["releases"] for g in groups] == [["2.5.1"], ["2.9.1"], ["2.13.0"]]
    assert [g["name"] for g in groups] == ["machine class unknown", "AMD EPYC, AVX2, 2 cores",
                                          "AMD EPYC, AVX512-BF16, 2 cores"]
    text = _render("table", [_tip()], runs)
    assert "Measured on AMD EPYC, AVX2, 2 cores" in text.replace("\\", "")
    assert "Machine class unknown" in text
    # a verdict that differs between two machine classes is not a change between releases
    assert tips_compat.verdict_changes([_tip()], runs) == []


def test_min_torch_decides_applicability():
    assert compat.applies(_tip("2.5"), "2.5.1") and not compat.applies(_tip("2.6"), "2.5.1")
    assert compat.applies(_tip("1.9"), settings.TORCH_MATRIX[0])


@pytest.mark.parametrize("release", settings.TORCH_MATRIX)
def test_committed_runs_are_complete_and_passing(release):
    """The committed matrix data has every current tip on every release, passed or not
    applicable, and passing doctests: a failed or missing tip, or failed doctests, fail here."""
    run = compat.load(release)
    assert run is not None, f"no recorded run for torch {release}: run nox -s \"matrix(torch='{release}')\""
    assert run["torch"] == release and run["torch_build"].split("+")[0] == release
    assert run["strict_deprecations"] == (release == settings.TORCH_MATRIX[-1])
    assert (run.get("doctests") or {}).get("status") == compat.PASSED, f"torch {release}: doctests did not pass"
    for tip in tipmeta.read_all():
        entry = run["tips"].get(tip.name)
        assert entry is not None, f"torch {release}: {tip.name} was never run"
        assert entry["status"] in (compat.PASSED, compat.NOT_APPLICABLE), f"torch {release}: {tip.name} {entry['status']}"


def test_older_entries_are_shown_as_such_on_the_real_page(site):
    """An entry recorded for another version of a tip says so on the compatibility page."""
    html = (site / "reference" / "compat.html").read_text(encoding="utf-8")
    runs = compat.load_all()
    # the tip's anchor is on its row in the first machine class's table: that table's releases
    first_class = tips_compat.classes(runs)[0]["releases"]
    for tip in tipmeta.read_all():
        version = records.tip_version(tip.path)
        older = [r for r in first_class if runs[r] and tip.name in runs[r]["tips"]
                 and not compat.is_current(runs[r]["tips"][tip.name], version)]
        start = html.find(f'id="compat-{tip.name.replace("_", "-")}"')
        if start < 0:
            assert not any(run and tip.name in run["tips"] for run in runs.values()), tip.name
            continue
        row = html[start:html.index("</tr>", start)]
        assert row.count("older tip version: the tip has changed since this run") == len(older), tip.name


def test_verdicts_that_differ_between_releases_are_listed():
    """Only passed runs of the tip's current source count; a stale or failed entry is no change."""
    tip = tipmeta.read_all()[0]
    version = records.tip_version(tip.path)

    def run(verdict, status=compat.PASSED, source=version):
        return {"tips": {tip.name: {"status": status, **source,
                                    "verdicts": {"cpu": {"verdict": verdict, "key": None}}}}}

    same = {"2.5.1": run("holds"), "2.9.1": run("holds"), "2.13.0": None}
    assert tips_compat.verdict_changes([tip], same) == []
    assert "No tip's verdict differs between the releases of one machine class (2 recorded" in _render(
        "changes", [tip], same).replace("\\", "")
    noise = {"2.5.1": run("holds"), "2.9.1": run("wrong", source={**version, "code_sha256": "0" * 64}), "2.13.0": run("wrong", compat.FAILED)}
    assert tips_compat.verdict_changes([tip], noise) == []
    flipped = {"2.5.1": run("holds"), "2.9.1": run("depends")}
    assert tips_compat.verdict_changes([tip], flipped) == [
        (tip.name, "cpu", "machine class unknown", {"2.5.1": "holds", "2.9.1": "depends"})]
    text = _render("changes", [tip], flipped)
    assert (f":doc:`/{tip.docname}` on CPU, machine class unknown: torch 2\\.5\\.1 :tip-verdict:`holds`\\, "
            "torch 2\\.9\\.1 :tip-verdict:`depends`") in text


def _matrix_run_with_a_set(tmp_path):
    """A matrix run of one tip, its verdict only in the run's result set (as compat.run writes
    them): a record of the committed H200 set stands for the run's record."""
    source = sorted(records.DATA_DIR.glob("cuda-nvidia-h200-*.json"))[0]
    record = next(r for r in records.load_set(source)["records"] if r["verdicts"].get("cuda"))
    entry = {"status": compat.PASSED, "topic": record["topic"], "verdicts": {}, "warnings": [],
             "date": record["date"], "run": record["date"],
             **{k: record[k] for k in records.VERSION_KEYS}}
    run = {"torch": "2.11.0", "torch_build": record["torch"], "python": "3.12.0", "date": record["date"],
           "device": "cuda", "device_name": "NVIDIA H200", "hosts": record["hosts"],
           "tips": {record["tip"]: entry}}
    path = tmp_path / "torch-2.11.0.json"
    path.write_text(json.dumps(run), encoding="utf-8")
    records.write_record(compat.set_path(path), records.make_set([record]))
    return path, record


def test_a_matrix_run_shows_the_verdicts_its_result_set_derives(tmp_path):
    """31.3: the matrix writes an ordinary result set; a release's verdicts come from its records,
    re-derived from their samples by the loader every set goes through, never from the run's own
    file."""
    path, record = _matrix_run_with_a_set(tmp_path)
    run = compat.read(path)
    got = run["tips"][record["tip"]]["verdicts"]["cuda"]
    assert got == {"verdict": record["verdicts"]["cuda"]["verdict"], "key": record["verdicts"]["cuda"].get("key")}
    assert run["records"][record["tip"]]["verdicts"] == record["verdicts"]
    # a verdict typed into the run's file is not what the page shows
    typed = json.loads(path.read_text(encoding="utf-8"))
    typed["tips"][record["tip"]]["verdicts"] = {"cuda": {"verdict": "wrong", "key": None}}
    path.write_text(json.dumps(typed), encoding="utf-8")
    assert compat.read(path)["tips"][record["tip"]]["verdicts"]["cuda"]["verdict"] == got["verdict"]


def test_a_matrix_set_whose_verdict_its_samples_do_not_give_is_refused(tmp_path):
    path, record = _matrix_run_with_a_set(tmp_path)
    decision = record["verdicts"]["cuda"]
    forged = "wrong" if decision["verdict"] != "wrong" else "holds"
    bad = {**record, "verdicts": {**record["verdicts"], "cuda": {**decision, "verdict": forged}}}
    records.write_record(compat.set_path(path), records.make_set([bad]))
    with pytest.raises(records.RecordError, match="records-torch-2.11.0.json"):
        compat.read(path)

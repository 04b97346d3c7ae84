"""Records and result sets (tipsite/records/): every field from another machine is checked, a
verdict is one device's and follows from its evidence, and the recorded H100 run is read with
each tip on the device it really ran on."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import pytest
from conftest import ROOT

from tipsite import records, tipkit, tipmeta

FIXTURE = ROOT / "tests" / "fixtures" / "gpu-run-2026-11-22-h100"
OLD_SET = FIXTURE / "cuda-torch2.11.0+cu130-shard1of1.json"
SOURCES = FIXTURE / "sources-4cf5b7c.json"
COMMITTED = sorted(records.DATA_DIR.glob("*.json"))


def decision(device="cpu", ratios=(1.3,) * 8):
    c = tipkit.compare_values("size 1", {"slow": [r for r in ratios], "fast": [1.0] * len(ratios)},
                              threshold=1.05, device=device, metric="time", unit="s", x=1)
    from unittest import mock

    # a GPU decision carries the GPU's calibration; none can be measured here
    with mock.patch.object(tipkit, "calibrate", return_value={"matmul_float32": 5e13}):
        return tipkit.decide(device, [("holds", {"g": "all above"}), ("wrong", {})], groups={"g": [c]}, key=c)


def result(**verdicts):
    return {"rule": "holds if faster", "verdicts": verdicts or {"cpu": decision()},
            "measurements": [], "skipped": []}


def record(tmp_path: Path, res=None, **overrides) -> dict:
    tip = tmp_path / "speed" / "tip_x.py"
    tip.parent.mkdir(parents=True, exist_ok=True)
    tip.write_text("import torch\n")
    rec = records.make_record(tip, res or result(), build_threads=2)
    rec.update(overrides)
    return rec


def test_a_valid_result_has_no_problems():
    assert records.result_problems(result()) == []


def test_the_old_single_verdict_is_refused():
    old = {"verdict": "holds", "rule": "r", "key": None, "measurements": [], "skipped": []}
    problems = records.result_problems(old)
    assert any("one verdict per device" in p for p in problems)


def test_a_verdict_without_evidence_is_refused():
    """A device's verdict written into the code, decided by no measurement of that device."""
    bare = tipkit.decide("cpu", [("holds", {})])
    problems = records.result_problems(result(cpu=bare))
    assert any("decides without any measurement of this device" in p for p in problems)


def test_a_verdict_from_another_device_s_measurements_is_refused():
    problems = records.result_problems(result(cuda=decision("cpu")))
    assert any("was decided on 'cpu', not 'cuda'" in p for p in problems)


def test_a_forged_verdict_is_refused():
    forged = {**decision(), "verdict": "wrong"}
    problems = records.result_problems(result(cpu=forged))
    assert any("the recorded evidence gives 'holds'" in p for p in problems)


def test_non_finite_numbers_are_refused():
    d = decision()
    d["key"] = {**d["key"], "low": float("nan")}
    assert records.result_problems(result(cpu=d))
    assert any("plain data" in p for p in records.result_problems(result(cpu=d)))


@pytest.mark.parametrize("devices,cuda,need", [
    (["cpu"], False, {"cpu"}), (["cpu"], True, {"cpu"}),
    (["cuda"], False, set()), (["cuda"], True, {"cuda"}),
    (["cpu", "cuda"], False, {"cpu"}), (["cpu", "cuda"], True, {"cuda"}),
])
def test_which_devices_a_run_must_decide(devices, cuda, need):
    """A CPU-only tip on a GPU machine decides the CPU (its figures are that machine's CPU)."""
    assert records.required_devices(devices, {"cpu", "cuda"} if cuda else {"cpu"}) == need


def test_a_run_that_skips_a_device_it_must_measure_is_refused():
    problems = records.coverage_problems(result(), ["cuda"], {"cpu", "cuda"})
    assert any("'cpu', which sphinx_gallery_tips_devices does not list" in p for p in problems)
    assert any("no decision for 'cuda'" in p for p in problems)


def test_records_name_the_wrong_field(tmp_path):
    good = record(tmp_path)
    assert records.record_problems(good) == []
    for field, value, said in [("build_threads", "two", "build_threads must be an integer from 1 to 4096"),
                               ("torch", "2.13.0\n.. raw:: html", "torch must be a version"),
                               ("date", "<script>", "date must look like"),
                               ("tip", "tip_x/../../etc", "tip and topic must be plain names")]:
        bad = {**good, field: value}
        assert any(said in p for p in records.record_problems(bad)), field


def test_hosts_describe_the_machine(tmp_path):
    rec = record(tmp_path)
    cpu = rec["hosts"]["cpu"]
    assert cpu["name"] and isinstance(cpu["flags"], list) and cpu["cores"] >= 1
    assert rec["verdicts"]["cpu"]["threads"]


def test_export_never_merges_two_machines_into_one_file(tmp_path):
    """Two CPU shards on different CPU models: both groups are kept, in two files."""
    out = tmp_path / "tips"
    for i, model in enumerate(["Intel Xeon", "AMD EPYC"]):
        res = result()
        tip = tmp_path / "gallery" / "speed" / f"tip_{i}.py"
        tip.parent.mkdir(parents=True, exist_ok=True)
        tip.write_text("# tip\n")
        rec = records.make_record(tip, res, build_threads=2)
        rec["hosts"]["cpu"]["name"] = model
        (out / "speed").mkdir(parents=True, exist_ok=True)
        records.write_record(out / "speed" / f"tip_{i}{records.RECORD_SUFFIX}", rec)
    written = records.export(tmp_path / "sets", out, tips=["tip_0", "tip_1"])
    assert len(written) == 2
    kept = [r["tip"] for p in written for r in records.load_set(p)["records"]]
    assert sorted(kept) == ["tip_0", "tip_1"]


def test_a_schema_1_set_is_refused_with_the_way_out(tmp_path):
    with pytest.raises(records.RecordError, match="convert it with `python -m tipsite.records upgrade`"):
        records.load_set(OLD_SET)


def test_the_recorded_h100_run_puts_every_tip_on_its_true_device():
    old = json.loads(OLD_SET.read_text())
    sources = json.loads(SOURCES.read_text())["tips"]
    new = records.upgrade_v1(old, sources, cpu_name="host", cuda_host={"name": "H100"})
    for rec in new["records"]:
        (device,) = rec["verdicts"]
        assert device == ("cuda" if "cuda" in sources[rec["tip"]]["devices"] else "cpu"), rec["tip"]
    cpu_only = {r["tip"] for r in new["records"] if "cuda" not in r["verdicts"]}
    assert {"tip_bf16_autocast_cpu", "tip_cpu_threads", "tip_from_numpy"} <= cpu_only


def test_the_committed_cuda_data_is_that_conversion_of_the_fixture():
    """docs/_data/results holds the recorded run converted, nothing typed in."""
    (path,) = [p for p in COMMITTED if "h100" in p.name]
    committed = json.loads(path.read_text())
    old = json.loads(OLD_SET.read_text())
    sources = json.loads(SOURCES.read_text())["tips"]
    again = records.upgrade_v1(old, sources, cpu_name=committed["hosts"]["cpu"]["name"],
                               cuda_host=committed["hosts"]["cuda"])
    again = records.upgrade_v2(again, VERSIONS)
    assert json.loads(json.dumps(again)) == committed
    records.load_set(path)


VERSIONS = json.loads((ROOT / "tests" / "fixtures" / "tip-versions.json").read_text())["versions"]


def test_a_schema_2_set_is_refused_with_the_way_out(tmp_path):
    old = json.loads(COMMITTED[0].read_text())
    old["schema"] = records.V2_SET_SCHEMA
    path = tmp_path / "v2.json"
    path.write_text(json.dumps(old))
    with pytest.raises(records.RecordError, match="upgrade-v2"):
        records.load_set(path)


def test_committed_data_carries_the_version_of_the_file_it_ran():
    """Every committed record and compatibility entry: its version digests are those of the tip
    file (or its download) whose SHA-256 it names: tests/fixtures/tip-versions.json for data
    older than the download, the git history (records.history_versions) for the rest."""
    from tipsite import compat

    entries = [(rec["tip"], rec["source_sha256"], rec) for path in COMMITTED
               for rec in records.load_set(path)["records"]]
    entries += [(name, entry["sha256"], entry) for run in filter(None, compat.load_all().values())
                for name, entry in run["tips"].items()]
    missing = {tip for tip, sha, _ in entries if sha not in VERSIONS}
    if missing:
        import subprocess

        shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT,
                                 capture_output=True, text=True).stdout.strip()
        assert shallow != "true", "this test reads tip versions from the git history: git fetch --unshallow"
    history = records.history_versions(tips=missing) if missing else {}
    for tip, sha, entry in entries:
        known = VERSIONS.get(sha) or history.get(sha)
        assert known, f"{tip}: no tip file in the fixture or this clone's history has SHA-256 {sha}"
        assert known["tip"] == tip
        assert {k: entry[k] for k in records.VERSION_KEYS} == {k: known[k] for k in records.VERSION_KEYS}, tip
    assert len(entries) > 200


def test_each_version_in_the_fixture_is_that_of_the_file_in_its_commit():
    """Recomputed from the git history: every entry whose commit this clone holds (a shallow clone
    holds none of them; then nothing here can be checked, and the test says so by skipping)."""
    import hashlib
    import subprocess

    from tipsite import tipsource

    checked = 0
    for sha, entry in VERSIONS.items():
        tree = subprocess.run(["git", "ls-tree", "-r", entry["commit"], "--", "gallery"], cwd=ROOT,
                              capture_output=True, text=True)
        if tree.returncode != 0:
            continue
        (line,) = [ln for ln in tree.stdout.splitlines() if ln.endswith(f"/{entry['tip']}.py")]
        text = subprocess.run(["git", "cat-file", "blob", line.split()[2]], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout
        assert hashlib.sha256(text.encode()).hexdigest() == sha, entry["tip"]
        # digested against the helpers of its own commit: a function the kit gained later is,
        # in a file of that time, the tip's own code (as records.history_versions reads it)
        kit_file = subprocess.run(["git", "show", f"{entry['commit']}:{records.KIT}"], cwd=ROOT,
                                  capture_output=True, text=True)
        kit = tipsource.kit_from_text(kit_file.stdout) if kit_file.returncode == 0 else None
        assert {k: entry[k] for k in records.VERSION_KEYS} == tipsource.version(text, kit=kit), entry["tip"]
        checked += 1
    if not checked:
        pytest.skip("this clone has none of the commits the fixture names (shallow clone)")


H200_RUNS = ROOT / "tests" / "fixtures" / "gpu-run-2026-11-26-h200" / "runs.csv"


def test_the_committed_h200_set_is_the_recorded_run():
    """docs/_data/results holds run 4 of the H200 record (its README), as the machine wrote it:
    each tip's verdict and key figure are the ones runs.csv lists for that run."""
    (path,) = [p for p in COMMITTED if "h200" in p.name]
    committed = records.load_set(path)
    assert committed["hosts"]["cuda"]["name"] == "NVIDIA H200" and committed["torch"] == "2.11.0+cu130"
    with H200_RUNS.open(newline="") as f:
        rows = {(r["tip"], r["device"]): r for r in csv.DictReader(f)}
    seen = set()
    for rec in committed["records"]:
        for device, decision in rec["verdicts"].items():
            row = rows[(rec["tip"], device)]
            assert decision["verdict"] == row["run4_verdict"], rec["tip"]
            value = (decision.get("key") or {}).get("value")
            assert ("" if value is None else repr(value)) == row["run4_value"], rec["tip"]
            seen.add((rec["tip"], device))
    assert seen == set(rows)


def test_the_cuda_runners_guard_refuses_the_committed_h200_set_for_its_missing_calibration_only(capsys):
    """It decides CUDA for exactly the tips that measure it (the H100 set predates some tips'
    device lists, so the guard does not apply to it); it predates the GPU's calibration, the one
    thing the guard now refuses it for."""
    (path,) = [p for p in COMMITTED if "h200" in p.name]
    assert records.expect_device("cuda", [str(path)]) == 1
    problems = capsys.readouterr().err.splitlines()[1:]
    # it predates the GPU's calibration, which the guard now asks of every CUDA decision
    assert problems and all(p.endswith("its cuda decision carries no calibration of the GPU") for p in problems)


def test_expect_device_fails_when_a_cpu_only_record_claims_cuda(tmp_path, capsys):
    data = json.loads(COMMITTED[0].read_text())
    forged = copy.deepcopy(data)
    for rec in forged["records"]:
        if rec["tip"] == "tip_bf16_autocast_cpu":
            rec["verdicts"] = {"cuda": {**rec["verdicts"]["cpu"], "device": "cuda"}}
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(forged))
    assert records.expect_device("cuda", [str(path)]) == 1
    assert "tip_bf16_autocast_cpu: claims a cuda result but does not measure cuda" in capsys.readouterr().err


def test_device_states_current_stale_and_not_measured(tmp_path):
    this = record(tmp_path)
    other = {**copy.deepcopy(this), "code_sha256": "0" * 64, "date": "2026-01-01 00:00 UTC",
             "verdicts": {"cuda": {**decision("cuda")}},
             "hosts": {**this["hosts"], "cuda": {"name": "GPU"}}}
    version = {k: this[k] for k in records.VERSION_KEYS}
    states = records.device_states("tip_x", ["cpu", "cuda", "cpu"][:2], version, this,
                                   [{"path": "s.json", "records": [other]}])
    assert states["cpu"]["state"] == "measured" and states["cpu"]["origin"] == "this build"
    assert states["cuda"]["state"] == "stale"
    assert records.device_states("tip_x", ["cuda"], version, this, [])["cuda"]["state"] == "not measured"


def test_every_tip_device_is_in_the_vocabulary():
    for tip in tipmeta.read_all():
        assert set(tip.devices) <= set(records.devices())


# --- issue 32: records that cannot lie, hide others or stall a build --------------------------

def _h200(tip: str) -> dict:
    (path,) = [p for p in COMMITTED if "h200" in p.name]
    return copy.deepcopy(next(r for r in records.load_set(path)["records"] if r["tip"] == tip))


def test_every_run_is_a_column_and_reused_host_names_replace_nothing():
    """columns kept one record per torch, threads and host names: of two same-class runs only the
    newer showed, and a set reusing the committed H200 set's host names replaced its row."""
    real = _h200("tip_channels_last")
    again = {**copy.deepcopy(real), "date": "2026-11-27 09:30 UTC"}  # same names, another run
    again["verdicts"]["cuda"]["verdict"] = "wrong"
    epyc = {**copy.deepcopy(real), "date": "2026-11-25 08:00 UTC",
            "hosts": {**real["hosts"], "cpu": {**real["hosts"]["cpu"], "cores": 64}}}
    sets = [{"path": "h200.json", "records": [real]}, {"path": "contrib.json", "records": [again, epyc]},
            {"path": "copy.json", "records": [copy.deepcopy(real)]}]  # the very same run again
    shown = records.columns("tip_channels_last", None, sets)
    assert len(shown) == 3 and {r["date"] for r in shown} == {real["date"], again["date"], epyc["date"]}
    classes = [records.machine_class(r, "cpu") for r in shown]
    assert classes == sorted(classes)  # grouped by machine class
    same = [r for r in shown if r["hosts"] == real["hosts"]]
    assert [r["date"] for r in same] == sorted((r["date"] for r in same), reverse=True)  # newest first


def test_measured_on_says_how_many_runs_of_a_class_agree_and_shows_the_others():
    from tipsite.sphinxext.view import TipView

    tip = next(t for t in tipmeta.read_all() if t.name == "tip_channels_last")
    version = records.tip_version(tip.path)
    runs = []
    for i, verdict in enumerate(["holds", "holds", "wrong"]):
        r = {**_h200("tip_channels_last"), **version, "date": f"2026-11-2{i} 08:00 UTC"}
        r["verdicts"]["cuda"]["verdict"] = verdict
        runs.append(r)
    view = TipView(tip=tip, record=None, devices={}, columns=runs,
                   origins={id(r): f"set{i}.json" for i, r in enumerate(runs)})
    rows = [r for r in view.measured_on() if r["device"] == "CUDA"]
    assert len(rows) == 3  # every run has its row
    (line,) = [s for s in view.measured_summary() if s.startswith("CUDA")]
    assert "3 runs of this version disagree: 2 say holds" in line and "wrong (2026-11-22 08:00 UTC" in line
    # 31.2: a busy machine's run decided nothing; another torch release is another condition
    busy = {**copy.deepcopy(runs[0]), "date": "2026-11-27 08:00 UTC"}
    busy["verdicts"]["cuda"]["verdict"] = "busy"
    newer = {**copy.deepcopy(runs[2]), "torch": "2.99.0+cu999", "date": "2026-11-28 08:00 UTC"}
    view = TipView(tip=tip, record=None, devices={}, columns=[*runs, busy, newer],
                   origins={id(r): f"set{i}.json" for i, r in enumerate([*runs, busy, newer])})
    lines = [s for s in view.measured_summary() if s.startswith("CUDA")]
    assert len(lines) == 1 and "torch 2.11.0: the 3 runs of this version disagree" in lines[0], lines


def test_a_cuda_decision_needs_the_gpu_s_own_evidence():
    """A CUDA decision built from host figures (no GPU busy time, no calibration) under an H200
    host passed vet and headed tip_channels_last's page."""
    forged = _h200("tip_channels_last")
    problems = records.evidence_problems(forged, "cuda")
    assert "its cuda decision carries no calibration of the GPU" in problems
    assert any("a timing without the GPU's busy time" in p for p in problems)
    comparison = forged["verdicts"]["cuda"]["comparisons"][0]
    comparison["kernels"] = {"base": 0, "cand": 3}
    assert any("the profiler saw no GPU activity" in p for p in records.evidence_problems(forged, "cuda"))
    assert records.evidence_problems(forged, "cpu") == []


def test_the_new_comparison_fields_and_busy_are_checked():
    """tips-record/4 (docs: record-format): cores, kernels, the verdict 'busy' with its why."""
    d = json.loads(json.dumps(decision()))  # as recorded
    c = d["comparisons"][0]
    c["cores"] = {"needed": 2, "others": 0.1, "free": True}
    c["kernels"] = {"base": 12, "cand": 9}
    assert records.decision_problems(d, "cpu") == []
    for bad in ({"needed": 0, "others": 0.0, "free": True}, {"needed": 2, "others": -1, "free": True},
                {"needed": 2, "others": 0.0, "free": "yes"}, {"needed": 2}):
        c["cores"] = bad
        assert any("cores is" in p for p in records.decision_problems(d, "cpu")), bad
    # as compare_times writes it: with the machine's cores, 'free' is recomputed, never trusted
    c["cores"] = {"needed": 2, "machine": 2, "others": 0.1, "free": True}
    assert records.decision_problems(d, "cpu") == []
    c["cores"] = {"needed": 2, "machine": 2, "others": 1.5, "free": True}
    assert any("cores 'free' is True but its readings give False" in p
               for p in records.decision_problems(d, "cpu"))
    c["cores"] = {"needed": 1, "machine": 2, "others": None, "free": None}  # no reading
    assert records.decision_problems(d, "cpu") == []
    assert "busy" in records.decision_verdicts()


def test_vet_time_is_bounded_by_the_samples_a_comparison_may_hold():
    """20,000 samples in one comparison passed vet after 108 s (median_interval grows ~n^2.7):
    beyond MAX_SAMPLES a comparison is refused before any interval is computed."""
    n = 20_000
    d = decision(ratios=(1.3,) * 8)
    c = d["comparisons"][0]
    c["base"], c["cand"], c["ratios"] = [1.3] * n, [1.0] * n, [1.3] * n
    from unittest import mock

    with mock.patch.object(tipkit, "median_interval", side_effect=AssertionError("computed")):
        problems = records.decision_problems(d, "cpu")
    assert any(f"more than {records.MAX_SAMPLES} samples" in p for p in problems)


def test_the_rule_manifest_knows_every_current_tip_version_on_each_device_it_measures():
    """conf/tip-rules.json is made from the project's own runs (tipsite/records/rules.py); a tip
    edited without running it again (`python -m tipsite.tipcheck --rules TIP`, and --fake-cuda
    for CUDA) has no entry, and vet would refuse every reader's record of it."""
    manifest = records.rules.load()
    missing = []
    for tip in tipmeta.read_all():
        entry = manifest["tips"].get(f"{tip.name}:{records.tip_version(tip.path)['code_sha256']}", {})
        missing += [f"{tip.name} {d}" for d in tip.devices if not entry.get(d)]
    # the runs that failed where the manifest was made are listed, each with why (and only they)
    assert sorted(missing) == sorted(manifest.get("missing", {})), "no rule manifest entry: " + ", ".join(
        m for m in missing if m not in manifest.get("missing", {}))
    assert all(manifest["missing"].values())


def test_the_rule_manifest_takes_a_tip_version_s_shapes_and_refuses_any_other(tmp_path):
    """What a tip's code decides by, from its runs (tipsite/records/rules.py): two runs with a fact
    of two kinds make one shape; a record with other cases, thresholds, groups or key is refused,
    and one of a version the manifest does not know."""
    rec = json.loads(json.dumps(record(tmp_path)))
    rec["verdicts"]["cpu"]["facts"] = {"raised": True}
    manifest = {"tips": {}}
    assert records.rules.add(manifest, rec) == ["tip_x cpu"]
    other = copy.deepcopy(rec)
    other["verdicts"]["cpu"]["facts"] = {"raised": None}
    assert records.rules.add(manifest, other) == []  # one shape, the fact's kinds merged
    assert records.rules.shape_problems(other, "cpu", manifest) == []
    path = tmp_path / "rules.json"
    records.rules.write(manifest, path)
    merged = {"tips": {}}
    assert records.rules.merge(merged, records.rules.load(path)) == ["tip_x cpu"]
    assert records.rules.load(path)["tips"] == merged["tips"]
    for forge, said in [(lambda d: d.update(cases=[["wrong", {}]]), "cases"),
                        (lambda d: d["comparisons"][0].update(threshold=0.5), "threshold"),
                        (lambda d: d["groups"].update(extra=["size 1"]), "groups"),
                        (lambda d: d["key"].update(name="another"), "key"),
                        (lambda d: d["facts"].update(raised="yes"), "fact 'raised' (text")]:
        bad = copy.deepcopy(rec)
        forge(bad["verdicts"]["cpu"])
        (problem,) = records.rules.shape_problems(bad, "cpu", manifest)
        assert "not the one this version of the tip makes" in problem and said in problem, problem
    unknown = {**rec, "code_sha256": "1" * 64}
    assert "no rule is known for this version" in records.rules.shape_problems(unknown, "cpu", manifest)[0]


def test_expect_device_fails_a_set_whose_profiler_could_not_see_the_gpu(tmp_path, capsys):
    """The CUDA runner's guard refuses a blind profiler's set: one whose comparison recorded no
    GPU activity for a variant (``kernels`` 0, refused as the set is read), and one of the
    format before ``kernels`` whose variant shows GPU timings with no busy time at all
    (gpucheck, run on every record). Here the H200 set's first CUDA timing, given those fields."""
    (path,) = [p for p in COMMITTED if "h200" in p.name]
    for kernels in ({"kernels": {"base": 0, "cand": 4}}, {}):
        forged = json.loads(path.read_text())
        rec, c = next((r, c) for r in forged["records"]
                      for c in r["verdicts"].get("cuda", {}).get("comparisons", []) if c.get("metric") == "time")
        c.update(device_time={"base": 0.0, "cand": 1e-3}, window={"base": 2e-3, "cand": 2e-3},
                 bound="host", **kernels)
        rec["verdicts"]["cuda"]["calibration"] = {"matmul_float32": 5e13, "launch_s": 5e-6}
        out = tmp_path / "blind.json"
        out.write_text(json.dumps(forged))
        assert records.main(["expect-device", "cuda", str(out)]) == 1
        err = capsys.readouterr().err
        blind = [line for line in err.splitlines() if rec["tip"] in line and c["name"] in line]
        assert blind and "GPU" in blind[0], err

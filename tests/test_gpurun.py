"""The CUDA procedure (tipsite/gpurun.py) rehearsed end to end on the fake CUDA device.

A throwaway site of three tiny CUDA tips of its own goes through what a lent GPU machine does
(docs/how_built.rst, "CUDA results"): command ``first`` runs shard 1 of the plan into its $OUT;
command ``rest`` runs the others, and is killed (SIGKILL, as a command past its limit is) while
its last tip still runs; what it exported before comes back; the returned sets are carried
(``--sets``) and ``rest`` again runs only what is missing; ``collect`` makes one set that
``expect-device cuda`` accepts. The figures of the fake device mean nothing and go nowhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINYSITE, build_env, make_tip
from test_shards import SPEED_BODY

from tipsite import cudacost, gpurun, records, shards

ROOT = Path(__file__).resolve().parents[1]

FACTS_BODY = '''\
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
x = torch.tensor([1.0, 2.0], device=device, requires_grad=True)
RULE = "holds if a tensor on the device can require grad"
decision = decide(device, [("holds", {"requires grad": True}), ("wrong", {})],
                  facts={"requires grad": x.requires_grad})
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}
'''
# The tip that runs out of time: it waits while the test's FIXTURE_SLEEP_S says so (a GPU
# slower than planned), and is quick on the rerun.
SLOW_BODY = '''\
import os
import time

import torch

time.sleep(float(os.environ.get("FIXTURE_SLEEP_S", "0")))
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
x = torch.ones(3, device=device)
RULE = "holds if a sum of ones on the device counts them"
decision = decide(device, [("holds", {"sum": 3.0}), ("wrong", {})],
                  facts={"sum": float(x.sum())})
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}
'''
# Estimates for the plan: facts alone in command 1; sweep, then slow, in command 2 (a topic's
# tips run in file-name order).
ESTIMATES = {"tip_fixture_facts": 10.0, "tip_fixture_sweep": 1.0, "tip_fixture_zslow": 1.0}


def sources() -> dict[str, str]:
    both = '["cpu", "cuda"]'
    return {
        "correctness/tip_fixture_facts.py": make_tip(FACTS_BODY, title="Facts on the device", devices=both),
        "speed/tip_fixture_sweep.py": make_tip(
            SPEED_BODY, title="A tiny sweep", kind="speed", devices=both,
            helpers=("compare_times", "decide", "plot_ratios", "report")),
        "speed/tip_fixture_zslow.py": make_tip(SLOW_BODY, title="A slow one", devices=both),
    }


class Lent:
    """A working tree as the lent machine sees it: the tiny site, its build, $OUT per command."""

    def __init__(self, root: Path):
        import shutil

        self.root = root
        self.src = root / "src"
        shutil.copytree(TINYSITE, self.src)
        for rel, text in sources().items():
            path = self.src / "gallery" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            (path.parent / "README.rst").write_text(f"{path.parent.name}\n{'-' * len(path.parent.name)}\n")
            path.write_text(text, encoding="utf-8")
        self.done = root / "gpu-done"   # .gpu-done/: the returned sets, carried to the next command
        self.done.mkdir()
        (root / "estimates.json").write_text(json.dumps(ESTIMATES), encoding="utf-8")

    def command(self, part: str, out: Path, **env: str) -> list[str]:
        return [sys.executable, "-m", "tipsite.gpurun", part, "--fake-cuda", "--out", str(out),
                "--docs", str(self.src), "--gallery", str(self.src / "gallery"),
                "--tips-out", str(self.src / "tips"), "--work", str(self.root / "work"),
                "--sets", str(self.done), "--estimates", str(self.root / "estimates.json"),
                "--export-every", "1"]

    def run(self, part: str, out: Path, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(part, out), cwd=ROOT, env=build_env(**env),
                              capture_output=True, text=True, timeout=600)

    def carry_back(self, out: Path) -> None:
        """What the procedure does here with a command's returned sets: into .gpu-done/."""
        for path in result_sets(out):
            (self.done / path.name).write_bytes(path.read_bytes())


def result_sets(out: Path) -> list[Path]:
    return sorted(p for p in out.glob("*.json") if not p.name.startswith("summary-"))


def tips_in(paths: list[Path]) -> set[str]:
    return {r["tip"] for p in paths for r in records.load_set(p)["records"]}


def summary(out: Path) -> dict:
    (path,) = out.glob("summary-*.json")
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.timeout(900)
def test_the_procedure_on_the_fake_device_with_a_command_cut_short(tmp_path):
    lent = Lent(tmp_path)

    # Command 1: shard 1 of the plan.
    out1 = tmp_path / "out1"
    proc = lent.run("first", out1)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s1 = summary(out1)
    assert s1["planned"] == ["tip_fixture_facts"] and s1["done"] == ["tip_fixture_facts"]
    assert tips_in(result_sets(out1)) == {"tip_fixture_facts"}
    assert list(out1.glob("pages-*.tgz")) and list(out1.glob("steps-*.log"))
    lent.carry_back(out1)

    # Command 2 runs out of time: killed while its last tip runs, as the machine's limit does.
    out2 = tmp_path / "out2"
    cmd = subprocess.Popen(lent.command("rest", out2), cwd=ROOT, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True,
                           env=build_env(FIXTURE_SLEEP_S="600"))
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and "tip_fixture_sweep" not in _returned(out2):
            assert cmd.poll() is None, "command 2 ended before it was cut"
            time.sleep(1)
        assert "tip_fixture_sweep" in _returned(out2), "the finished tip was never exported"
    finally:
        sphinx_pid = summary(out2).get("sphinx_pid") if list(out2.glob("summary-*.json")) else None
        os.killpg(cmd.pid, signal.SIGKILL)
        if sphinx_pid:
            os.killpg(sphinx_pid, signal.SIGKILL)
        cmd.wait()
    s2 = summary(out2)
    assert s2["planned"] == ["tip_fixture_sweep", "tip_fixture_zslow"]
    assert "tip_fixture_zslow" in s2["missing"]
    assert tips_in(result_sets(out2)) == {"tip_fixture_sweep"}
    lent.carry_back(out2)

    # The incremental rerun: only what is missing.
    out3 = tmp_path / "out3"
    proc = lent.run("rest", out3)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s3 = summary(out3)
    assert s3["planned"] == ["tip_fixture_zslow"], s3
    assert set(s3["already_current"]) == {"tip_fixture_facts", "tip_fixture_sweep"}
    lent.carry_back(out3)

    # Back here: one set, every CUDA tip in it, accepted as CUDA results.
    merged = gpurun.collect(sorted(lent.done.glob("*.json")), tmp_path / "results")
    assert len(merged) == 1
    assert tips_in(merged) == set(ESTIMATES)
    for record in records.load_set(merged[0])["records"]:
        assert "cuda" in record["verdicts"], record["tip"]

    # Nothing left: a further command runs nothing.
    out4 = tmp_path / "out4"
    proc = lent.run("rest", out4)
    assert proc.returncode == 0 and summary(out4)["planned"] == [], proc.stdout[-2000:]


def _returned(out: Path) -> set[str]:
    try:
        return tips_in(result_sets(out))
    except (records.RecordError, OSError, ValueError):
        return set()  # caught while being written


# --- the slot's arithmetic -----------------------------------------------------------------

def _slot() -> tuple[dict, list[str]]:
    names = [t.name for t in cudacost.cuda_tips()]
    return cudacost.slot(names, cudacost.load_estimates()), names


def test_each_command_of_the_cuda_build_fits_its_limit_by_its_estimates():
    """Every tip that lists cuda, split into the procedure's two commands on the committed
    estimates (conf/cuda_timings.json): each command within 300 s. These are ESTIMATES; a GPU
    run replaces them with what it measured (python -m tipsite.cudacost measured)."""
    plan, names = _slot()
    assert sorted(t for part in plan["parts"] for t in part) == sorted(names)
    assert len(plan["parts"]) <= cudacost.SLOT_COMMANDS
    assert max(plan["command_s"]) <= cudacost.SLOT_COMMAND_S, cudacost.describe(names)


def test_the_whole_cuda_build_fits_the_slot_by_its_estimates():
    plan, names = _slot()
    assert plan["total_s"] <= cudacost.SLOT_TOTAL_S, cudacost.describe(names)


def test_every_cuda_tip_has_an_estimate_with_its_source():
    data = cudacost.load()["tips"]
    names = {t.name for t in cudacost.cuda_tips()}
    assert set(data) == names, f"missing: {sorted(names - set(data))}; stale: {sorted(set(data) - names)}"
    for name, entry in data.items():
        assert entry["estimate_s"] > 0, name
        assert entry["source"].startswith(("measured ", "estimated from")), name
        if entry["source"].startswith("measured "):  # only a GPU run's own time says so
            assert "measured" in entry, name
        assert entry["probe"] == "passed", f"{name}: its CUDA branch failed on the fake device"


def test_the_estimates_follow_from_the_probed_calls():
    """The file says what the model gives for each tip's calls (no hand-edited estimate)."""
    data = cudacost.load()
    assert data["model"]["rounds_a_call"] == cudacost.typical_rounds()
    for name, entry in data["tips"].items():
        estimate, source, model = cudacost.tip_estimate(
            name, entry["calls"], entry.get("measured"), entry.get("h200_2026_11_26_share_s"),
            entry.get("h200_2026_11_26_comparisons"), data["model"]["rounds_a_call"])
        assert (estimate, source, model) == (entry["estimate_s"], entry["source"], entry["model_s"]), name


def test_the_slot_check_fails_above_the_limit():
    names = ["tip_a", "tip_b", "tip_c"]
    assert cudacost.slot(names, {"tip_a": 100, "tip_b": 100, "tip_c": 50})["fits"]
    too_long = cudacost.slot(names, {"tip_a": 280, "tip_b": 20, "tip_c": 20})
    assert not too_long["fits"] and max(too_long["command_s"]) > cudacost.SLOT_COMMAND_S
    too_much = cudacost.slot(names, {"tip_a": 170, "tip_b": 170, "tip_c": 100})
    assert not too_much["fits"] and too_much["total_s"] > cudacost.SLOT_TOTAL_S


def test_a_call_bound_grows_with_its_budget_and_rounds():
    small = cudacost.call_bound({"round_s": 0.02, "budget_s": 0.5, "min_rounds": 6, "max_rounds": 40})
    large = cudacost.call_bound({"round_s": 0.02, "budget_s": 2.0, "min_rounds": 6, "max_rounds": 40})
    capped = cudacost.call_bound({"round_s": 0.02, "budget_s": 100.0, "min_rounds": 6, "max_rounds": 10})
    assert small < large and capped < large
    unprofiled = cudacost.call_bound({"round_s": 0.02, "budget_s": 2.0, "busy": False})
    # one profiler session for both variants' passes (tipkit.device_busy), two in the worst case
    assert large - unprofiled == pytest.approx(2 * 0.02 + cudacost.PROFILE_PASS_S)
    worst = cudacost.call_bound({"round_s": 0.02, "budget_s": 2.0}, None, 0.5, sessions=2)
    assert worst - cudacost.call_bound({"round_s": 0.02, "budget_s": 2.0, "busy": False}) \
        == pytest.approx(2 * (0.02 + 0.5))


def test_only_runs_the_named_tips(tmp_path):
    gallery = tmp_path / "gallery" / "speed"
    gallery.mkdir(parents=True)
    for name in ("tip_a", "tip_b", "tip_ab"):
        (gallery / f"{name}.py").write_text(make_tip("RESULT = None\n"), encoding="utf-8")
    pattern = shards.filename_pattern(tmp_path / "gallery", shard="", only="tip_a")
    import re

    assert re.search(pattern, "/x/speed/tip_a.py") and not re.search(pattern, "/x/speed/tip_ab.py")
    with pytest.raises(shards.ShardError, match="not in the gallery"):
        shards.filename_pattern(tmp_path / "gallery", shard="", only="tip_zz")
    with pytest.raises(shards.ShardError, match="cannot both"):
        shards.filename_pattern(tmp_path / "gallery", shard="1/2", only="tip_a")


def test_the_carried_wheels_are_pinned_as_the_site_pins_them():
    """conf/requirements/gpu-docs.txt pins what docs.txt pins (but the machine's numpy,
    matplotlib and pillow)."""
    def pins(name):
        out = {}
        for line in (ROOT / "conf" / "requirements" / name).read_text().splitlines():
            line = line.split("#")[0].strip()
            if "==" in line:
                k, v = line.split("==")
                out[k.strip().lower().replace("_", "-")] = v.strip()
        return out

    docs, gpu = pins("docs.txt"), pins("gpu-docs.txt")
    machine = {"numpy", "matplotlib", "pillow"}
    assert {k: v for k, v in docs.items() if k not in machine} == {k: gpu[k] for k in docs if k not in machine}
    assert not machine & set(gpu)


def test_a_gpu_runs_times_replace_the_estimates(tmp_path):
    path = tmp_path / "cuda_timings.json"
    path.write_text(cudacost.CUDA_TIMINGS_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"fake_cuda": False, "gpu": "NVIDIA H100 80GB HBM3",
                                   "date": "2026-12-01", "seconds": {"tip_sync_points": 4.2}}))
    assert cudacost.record_measured([summary], path) == ["tip_sync_points"]
    entry = cudacost.load(path)["tips"]["tip_sync_points"]
    assert entry["estimate_s"] == 4.2 and entry["source"] == "measured NVIDIA H100 80GB HBM3 2026-12-01"
    rehearsal = tmp_path / "fake.json"
    rehearsal.write_text(json.dumps({"fake_cuda": True, "seconds": {"tip_sync_points": 1.0}}))
    with pytest.raises(SystemExit, match="fake CUDA device"):
        cudacost.record_measured([rehearsal], path)

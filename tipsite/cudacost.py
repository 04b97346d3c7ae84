"""What the CUDA build is estimated to cost, per tip, until a GPU run measures it.

No per-tip CUDA time has been measured on the current code. What is known:

* the H200 run of 2026-11-26 (``tests/fixtures/gpu-run-2026-11-26-h200/``, sources 88c0c36)
  logged each shard's wall time only (run 4: 118 s and 99 s, 40 tips including 6 CPU-only
  ones; its run 2, which executed nothing, 37 s); its result set holds per-call medians and
  the rounds each comparison took, not how long a tip ran;
* the H100 run of 2026-11-22 (an older version of every tip) left sphinx-gallery's time of 39
  tips (:data:`H100_2026_11_22_S`);
* what a tip asks the timing helper for, found by running each tip's CUDA branch on the fake
  CUDA device (:mod:`tipsite.fakecuda`) with a note of every ``compare_times`` call's
  ``round_s``, ``budget_s``, ``min_rounds``, ``max_rounds`` and ``busy`` (:func:`probe`).

A tip the H200 ran is estimated at its share of that run (:func:`h200_shares`: each shard's
time less its fixed cost, shared in proportion to the H100 times) plus the profiled passes
(``tipkit.device_busy``) its calls add since that run. A tip added since is estimated by the
model of its calls (:func:`call_bound`, with the rounds the H200's comparisons took on
average, :func:`typical_rounds`) plus a fixed cost per tip and, for compilation or processes,
an extra amount stated with its reason (:data:`EXTRA_S`). Every figure here is an ESTIMATE
and the file says which source each tip's comes from; ``worst_case_s`` bounds a tip with
every call spending its whole budget. ``python -m tipsite.cudacost update`` rewrites
``conf/cuda_timings.json``; ``measured`` takes a GPU run's times; ``plan`` prints the slot.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from conf import settings
from tipsite import tipmeta, tipsource

CUDA_TIMINGS_FILE = settings.CONF_DIR / "cuda_timings.json"
H200_SET = "cuda-nvidia-h200-torch2.11.0+cu130-2026-11-26.json"
# The H200 run of 2026-11-26 (tests/fixtures/gpu-run-2026-11-26-h200/, steps-run4.log): the
# sources it built, and each shard's wall time (shard 1/2 from 8 s to 126 s, 2/2 to 225 s).
H200_COMMIT = "88c0c36"
H200_SHARD_WALL_S = (118.0, 99.0)
# What a shard's Sphinx run costs besides its tips: its run 2, which executed nothing, took 37 s
# for both shards with the wheels' install and the export.
H200_SHARD_FIXED_S = 18.5
# sphinx-gallery's time of each tip on the H100 of 2026-11-22 (an older version of every tip;
# the lent machine's build log, copied here): it shares the H200 shards' times among their tips.
H100_2026_11_22_S = {
    "tip_activation_checkpointing": 1.74, "tip_anomaly_detection_off": 7.17,
    "tip_arange_indexing": 0.12, "tip_bf16_autocast_cpu": 12.17, "tip_channels_last": 7.06,
    "tip_closure_scope": 0.06, "tip_cpu_threads": 11.68, "tip_cudnn_benchmark": 10.02,
    "tip_dataloader_workers": 8.72, "tip_detach_logged_values": 0.13,
    "tip_eval_and_no_grad": 3.71, "tip_foreach_fused_optimizers": 14.29,
    "tip_from_numpy": 17.32, "tip_gradient_accumulation": 0.6, "tip_inference_mode": 33.3,
    "tip_map_location": 0.85, "tip_mean_loss_leak": 0.14, "tip_memory_allocated": 0.11,
    "tip_mixed_precision": 13.43, "tip_mmap_meta_load": 0.91, "tip_module_conventions": 0.02,
    "tip_module_list": 0.03, "tip_non_blocking": 20.32, "tip_oom_retry": 1.19,
    "tip_optimizer_state": 0.08, "tip_pin_memory": 11.21, "tip_register_buffer_parameter": 0.01,
    "tip_shape_comments": 0.09, "tip_state_dict": 0.05, "tip_submodules": 0.02,
    "tip_sync_points": 3.69, "tip_tensor_core_multiples": 13.35, "tip_torch_compile": 7.14,
    "tip_track_metrics": 7.09, "tip_unneeded_detach": 0.01, "tip_variable_wrapping": 0.01,
    "tip_vectorize_loops": 7.64, "tip_weights_only_load": 0.02, "tip_zero_grad_set_to_none": 4.12,
}
FAKE = Path(__file__).with_name("fakecuda.py")

# --- the model's constants (assumptions, not measurements) ---------------------------------
# A profiler session (tipkit.device_busy): torch.profiler with CUPTI, its start, stop and event
# processing. The review in issue 30 put ~370 passes at 75-185 s, 0.2-0.5 s each: the middle
# for the estimate, the top for the worst case. compare_times profiles both variants in ONE
# session (since 2026-11-28): the estimate counts one session's cost a call, on the assumption
# (not measured) that start-up and stop, not the events, are most of it; the worst case still
# counts two, as if the cost were all in the events (twice as many in one session).
PROFILE_PASS_S = 0.35
PROFILE_PASS_WORST_S = 0.5
# Per tip, besides its timing calls: on the H100 of 2026-11-22 the 15 CUDA tips that time
# nothing took 0.01 to 1.19 s each (median 0.09 s) by sphinx-gallery's clock.
TIP_FIXED_S = 1.0
# Per command: the H200 run of 2026-11-26 that executed nothing (its run 2) took 37 s for two
# Sphinx runs with the wheels' install, packs and export: ~19 s a command; plus Python, torch
# and CUDA start and the calibration (tipkit.calibrate, once per process), ~3 s, and margin
# (that run did not start CUDA).
COMMAND_FIXED_S = 25.0
# Limits of the slot (issue 30): the whole CUDA build, and each of its (at most two) commands.
SLOT_TOTAL_S = 420.0
SLOT_COMMAND_S = 300.0
SLOT_COMMANDS = 2

# Untimed work the call bound cannot see, per tip (seconds, an estimate, with the reason).
EXTRA_S: dict[str, tuple[float, str]] = {
    "tip_cuda_graphs_reduce_overhead": (
        25.0, "torch.compile compiles the MLP for each batch size in two modes (reduce-overhead "
              "also records a CUDA graph): 6 compilations of a few seconds each since its CUDA "
              "sizes were cut from 5 to 3; issue 30 estimated 60-100 s for the tip with 10"),
    "tip_torch_compile": (15.0, "Inductor compiles one function per size"),
    "tip_jit_script_vs_compile": (15.0, "torch.compile of the model (Inductor) and torch.jit.script"),
    "tip_profile_low_gpu_utilization": (8.0, "DataLoader worker processes and profiler traces"),
    "tip_dataloader_workers": (6.0, "worker processes start per configuration"),
    "tip_expandable_segments": (8.0, "one Python process per allocator setting (torch import, CUDA init)"),
    "tip_deterministic_algorithms": (3.0, "fill and index_put_ passes outside compare_times"),
}
# Tips the H200 ran whose CUDA work was cut since (tip: what was cut): their share of that
# run no longer applies, the model of their calls does. (The tips cut for the slot of issue 30,
# cuda_graphs_reduce_overhead, jit_script_vs_compile, deterministic_algorithms and
# tf32_matmul_precision, were added after that run: the model applies to them anyway.)
RESIZED: dict[str, str] = {}


def call_bound(call: dict, rounds: float | None = None, pass_s: float = PROFILE_PASS_S,
               sessions: int = 1) -> float:
    """Seconds one ``compare_times`` call takes on a GPU by tipkit's loop: a warm-up and the
    doubling search for the calls per round (up to ``round_s`` per variant), then rounds of
    two variants of ``round_s`` each, then one profiled pass per variant, ``round_s`` of work
    each, plus the profiler's own cost (``pass_s`` for each of ``sessions``: both passes share
    one session, :data:`PROFILE_PASS_S`). ``rounds``: how many rounds it takes (kept within its
    ``min_rounds`` and ``max_rounds``); None: the most it may take, rounds until ``budget_s``
    is spent (one round may start just before), at most ``max_rounds``."""
    round_s = float(call.get("round_s", 0.02))
    budget = float(call.get("budget_s", 2.0))
    lo, hi = int(call.get("min_rounds", 6)), int(call.get("max_rounds", 40))
    setup = 2 * 2 * round_s
    if rounds is None:
        timed = min(hi * 2 * round_s, max(lo * 2 * round_s, budget + 2 * round_s))
    else:
        timed = min(max(rounds, lo), hi) * 2 * round_s
    return setup + timed + _profiled(call, pass_s, sessions)


def _profiled(call: dict, pass_s: float = PROFILE_PASS_S, sessions: int = 1) -> float:
    """One call's profiled passes: ``round_s`` of work per variant, plus ``sessions`` profiler
    sessions of ``pass_s`` each (none for a call with ``busy=False``)."""
    if not call.get("busy", True):
        return 0.0
    return 2 * float(call.get("round_s", 0.02)) + sessions * pass_s


def h200_rounds(path: Path | None = None) -> dict[str, tuple[float, int]]:
    """Each tip's mean rounds per timed comparison on CUDA in the H200 run of 2026-11-26 (its
    committed result set), how many rounds the comparisons took to settle on a GPU, and how
    many timed comparisons it made there."""
    from tipsite import records

    path = Path(path or records.DATA_DIR / H200_SET)
    out = {}
    for record in json.loads(path.read_text(encoding="utf-8"))["records"]:
        decision = (record.get("verdicts") or {}).get("cuda") or {}
        rounds = [len(c["ratios"]) for c in decision.get("comparisons", []) if c.get("metric") == "time"]
        if rounds:
            out[record["tip"]] = (round(sum(rounds) / len(rounds), 2), len(rounds))
    return out


def h200_shares() -> dict[str, float]:
    """Each tip's share of the H200 run's time (2026-11-26, run 4), in seconds: the run logged
    only each shard's wall time; the plan of its sources (commit 88c0c36, ``conf/timings.json``
    there) says which tips each shard ran; a shard's time less its fixed cost is shared among
    its tips in proportion to their H100 2026-11-22 times (a tip without one counts as the
    shard's median). Needs the git history; an ESTIMATE of what each tip took there."""
    import statistics

    from tipsite import shards

    def show(path):
        return subprocess.run(["git", "show", f"{H200_COMMIT}:{path}"], cwd=settings.ROOT,
                              capture_output=True, text=True, check=True).stdout

    timings = json.loads(show("conf/timings.json"))["seconds"]
    listing = subprocess.run(["git", "ls-tree", "-r", "--name-only", H200_COMMIT, "gallery"],
                             cwd=settings.ROOT, capture_output=True, text=True, check=True).stdout
    names = [Path(p).stem for p in listing.split() if Path(p).name.startswith("tip_")]
    shares = {}
    for part, wall in zip(shards.plan(names, len(H200_SHARD_WALL_S), timings), H200_SHARD_WALL_S):
        known = [H100_2026_11_22_S[t] for t in part if t in H100_2026_11_22_S]
        weight = {t: H100_2026_11_22_S.get(t, statistics.median(known)) for t in part}
        total = sum(weight.values())
        for t in part:
            shares[t] = round((wall - H200_SHARD_FIXED_S) * weight[t] / total, 2)
    return shares


def profiled_s(calls: list[dict]) -> float:
    """The profiled passes of ``calls`` (tipkit.device_busy, added after the H200 run)."""
    return sum(_profiled(c) for c in calls)


def model_calls(calls: list[dict], count: int | None) -> list[dict]:
    """The calls to count: on the fake device (one SM, no distinct calibrated sizes) a tip may
    make fewer than on a GPU; where the H200 made ``count`` timed comparisons, more than
    probed, the last call stands for the ones missing."""
    if not count or len(calls) >= count:
        return list(calls)
    filler = calls[-1] if calls else {}
    return list(calls) + [filler] * (count - len(calls))


def tip_estimate(name: str, calls: list[dict], measured: dict | None = None,
                 h200_s: float | None = None, count: int | None = None,
                 rounds: float | None = None) -> tuple[float, str, float]:
    """``(estimate, source, model)`` for one tip, in seconds on one H100. The model: its calls
    (:func:`call_bound`, each taking ``rounds`` rounds, the mean of the H200 run's timed
    comparisons, :func:`typical_rounds`; None: its whole budget) plus the fixed and extra costs. The
    estimate: a time measured on a GPU for this version of the tip (``measured``: ``{"s",
    "on"}``, :func:`record_measured`); else, for a tip the H200 ran, its share of that run
    (``h200_s``, :func:`h200_shares`) plus the profiled passes its calls add since (as many
    calls as it made there, ``count``, if the fake device found fewer); else the model."""
    extra = EXTRA_S.get(name, (0.0, ""))[0]
    calls = model_calls(calls, count)
    model = round(TIP_FIXED_S + extra + sum(call_bound(c, rounds) for c in calls), 1)
    if measured:
        return round(float(measured["s"]), 1), f"measured {measured['on']}", model
    if h200_s is not None and name not in RESIZED:
        return (max(0.1, round(h200_s + profiled_s(calls), 1)),
                "estimated from the H200 2026-11-26 run (its share of a shard's time) "
                "plus the profiled passes added since", model)
    return model, ("estimated from budget (tipsite/cudacost.py"
                   + (f", {rounds} rounds a call as on the H200 2026-11-26)" if rounds else ")")), model


def typical_rounds(found: dict[str, tuple[float, int]] | None = None) -> float:
    """The mean rounds of the H200 run's timed comparisons (2026-11-26): on a GPU most settle
    at the fewest rounds allowed, far from the whole budget."""
    found = h200_rounds() if found is None else found
    return round(sum(r * n for r, n in found.values()) / sum(n for _, n in found.values()), 2)


def worst_case(calls: list[dict], name: str, count: int | None = None) -> float:
    """The model with every call spending its whole budget and the profiler at the top of its
    range: what a slow GPU could take."""
    return round(TIP_FIXED_S + EXTRA_S.get(name, (0.0, ""))[0]
                 + sum(call_bound(c, None, PROFILE_PASS_WORST_S, sessions=2) for c in model_calls(calls, count)), 1)


def cuda_tips(gallery_dir: Path | None = None) -> list[tipmeta.Tip]:
    """Every tip that lists cuda in ``sphinx_gallery_tips_devices``."""
    return [t for t in tipmeta.read_all(gallery_dir) if "cuda" in t.devices]


# --- the probe -------------------------------------------------------------------------------

PROBE = r'''
import json, runpy, sys
sys.path.insert(0, ".")
import fakecuda
fakecuda.install()
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
found = {}
for tip in sys.argv[2:]:
    calls = []
    try:
        runpy.run_path(tip, init_globals={"_CUDACOST_CALLS": calls}, run_name="__main__")
        status = "passed"
    except BaseException as exc:
        status = f"failed: {type(exc).__name__}: {exc}"[:300]
    plt.close("all")
    found[tip[:-3]] = {"status": status, "calls": calls}
    json.dump(found, open(sys.argv[1], "w"))
'''
# Put first in the body of the download's compare_times: note the call's arguments.
NOTE = ("_CUDACOST_CALLS.append({'round_s': round_s, 'budget_s': budget_s, "
        "'min_rounds': min_rounds, 'max_rounds': max_rounds, 'busy': busy, "
        "'device': str(device)})")


def instrument(text: str) -> str:
    """The download ``text`` with :data:`NOTE` as the first statement of ``compare_times``."""
    import ast

    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "compare_times":
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                first = node.body[1]  # after the docstring
            lines = text.splitlines(keepends=True)
            indent = " " * first.col_offset
            lines.insert(first.lineno - 1, indent + NOTE + "\n")
            return "".join(lines)
    return text  # the tip times nothing with compare_times


def probe(paths: list[Path], timeout: float = 3600) -> dict[str, dict]:
    """Run the tips' downloads on the fake CUDA device, one after another in one process;
    return each tip's ``compare_times`` calls (and whether it ran to the end)."""
    from tipsite import compat

    with tempfile.TemporaryDirectory(prefix="cudacost-") as tmp:
        work = Path(tmp)
        for path in paths:
            target = tipsource.write_download(path, work)
            target.write_text(instrument(target.read_text(encoding="utf-8")), encoding="utf-8")
        shutil.copy(FAKE, work / FAKE.name)
        (work / "probe.py").write_text(PROBE, encoding="utf-8")
        proc = subprocess.run([sys.executable, "probe.py", "calls.json", *(p.name for p in paths)],
                              cwd=work, env=compat.reader_env(), capture_output=True, text=True,
                              timeout=timeout)
        out = work / "calls.json"
        found = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    why = f"no report (exit {proc.returncode}): {proc.stderr[-300:]}"
    return {p.stem: found.get(p.stem, {"status": why, "calls": []}) for p in paths}


# --- the file --------------------------------------------------------------------------------

def load(path: Path | None = None) -> dict:
    path = Path(path or CUDA_TIMINGS_FILE)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"tips": {}}


def load_estimates(path: Path | None = None) -> dict[str, float]:
    """Each CUDA tip's estimated seconds on one H100, as the shard plan balances them."""
    return {name: float(t["estimate_s"]) for name, t in load(path).get("tips", {}).items()}


def slot(names: list[str], estimates: dict[str, float] | None = None,
         commands: int = SLOT_COMMANDS) -> dict:
    """The CUDA build of ``names`` as the procedure runs it (tipsite/gpurun.py): the tips split
    into ``commands`` commands balanced on their estimates (:func:`tipsite.shards.plan`), each
    command's estimated seconds (its fixed cost and its tips) and the total. Estimates."""
    from tipsite import shards

    estimates = load_estimates() if estimates is None else estimates
    cost = shards.costs(names, estimates)
    parts = shards.plan(names, commands, estimates)
    seconds = [round(COMMAND_FIXED_S + sum(cost[t] for t in part), 1) for part in parts]
    return {"parts": parts, "command_s": seconds, "total_s": round(sum(seconds), 1),
            "fits": max(seconds) <= SLOT_COMMAND_S and sum(seconds) <= SLOT_TOTAL_S}


def describe(names: list[str]) -> str:
    """The plan of :func:`slot`, printed: which tips each command runs, and the estimates."""
    est = load_estimates()
    plan = slot(names, est)
    lines = [f"{len(names)} CUDA tips; ESTIMATED on one H100 (conf/cuda_timings.json): "
             f"{plan['total_s']:.0f} s in all (limit {SLOT_TOTAL_S:.0f} s), commands "
             + " + ".join(f"{s:.0f} s" for s in plan["command_s"])
             + f" (limit {SLOT_COMMAND_S:.0f} s each, {COMMAND_FIXED_S:.0f} s of it fixed)"]
    for i, part in enumerate(plan["parts"], 1):
        lines.append(f"command {i}: " + " ".join(f"{t} ({est.get(t, 0):.0f} s)" for t in
                                                   sorted(part, key=lambda t: -est.get(t, 0))))
    return "\n".join(lines)


def update(path: Path | None = None, only: list[str] | None = None, log=print,
           reprobe: bool = True) -> dict:
    """Probe the CUDA tips (``only``: these, keeping the others' calls; ``reprobe=False``:
    none that has calls already) and rewrite the file."""
    path = Path(path or CUDA_TIMINGS_FILE)
    old = load(path).get("tips", {})
    tips = {}
    every = cuda_tips()
    rounds_h200 = h200_rounds()
    rounds = typical_rounds(rounds_h200)
    shares = h200_shares()
    todo = [t.path for t in every if "calls" not in old.get(t.name, {})
            or (reprobe and (not only or t.name in only))]
    probed = probe(todo) if todo else {}
    for tip in every:
        prev = old.get(tip.name, {})
        if tip.name in probed:
            calls, status = probed[tip.name]["calls"], probed[tip.name]["status"]
            log(f"{tip.name}: {len(calls)} compare_times calls ({status})")
        else:
            calls, status = prev["calls"], prev.get("probe", "passed")
        measured = prev.get("measured")
        if measured and measured.get("version") != tip_version_key(tip.path):
            measured = None  # the tip changed since: its time is not this version's
        count = rounds_h200.get(tip.name, (None, None))[1]
        h200_s = shares.get(tip.name)
        estimate, source, model = tip_estimate(tip.name, calls, measured, h200_s, count, rounds)
        entry = {"estimate_s": estimate, "source": source, "model_s": model,
                 "worst_case_s": worst_case(calls, tip.name, count), "calls": calls, "probe": status}
        if h200_s is not None:
            entry["h200_2026_11_26_share_s"] = h200_s
        if count is not None:
            entry["h200_2026_11_26_comparisons"] = count
        if tip.name in H100_2026_11_22_S:
            entry["h100_2026_11_22_s"] = H100_2026_11_22_S[tip.name]
        if measured:
            entry["measured"] = measured
        if tip.name in EXTRA_S:
            entry["extra_s"], entry["extra_why"] = EXTRA_S[tip.name]
        if tip.name in RESIZED:
            entry["resized"] = RESIZED[tip.name]
        tips[tip.name] = entry
    data = {
        "about": "Estimated seconds each tip that lists cuda takes in the CUDA build on one "
                 "H100: ESTIMATES, not measurements, until a 'source' says 'measured' for the "
                 "tip's current version. 'h200_2026_11_26_share_s': the tip's share of the "
                 "H200 run's shard times (that run logged no tip's own time); 'model_s': "
                 "tipsite/cudacost.py's model of the tip's compare_times calls (found by "
                 "running its CUDA branch on the fake device), each spending its whole budget; "
                 "'worst_case_s': every call spending its whole budget, the profiler at the "
                 "top of its range and in two profiler sessions a call; "
                 "'h100_2026_11_22_s': sphinx-gallery's time for an older version of the tip "
                 "on the H100 of 2026-11-22. Rewrite with python -m tipsite.cudacost update.",
        "model": {"rounds_a_call": rounds, "profile_pass_s": PROFILE_PASS_S, "profile_pass_worst_s": PROFILE_PASS_WORST_S,
                  "tip_fixed_s": TIP_FIXED_S, "command_fixed_s": COMMAND_FIXED_S},
        "tips": tips,
    }
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return data


def tip_version_key(path: Path) -> str:
    from tipsite import records

    version = records.tip_version(path)
    return ":".join(version[k] for k in sorted(version))


def record_measured(summaries: list[Path], path: Path | None = None) -> list[str]:
    """Each tip's seconds from the summaries a GPU run returned (tipsite/gpurun.py) become its
    estimate, "measured <GPU> <date>", for the version of the tip that ran."""
    path = Path(path or CUDA_TIMINGS_FILE)
    data = load(path)
    tips = {t.name: t for t in cuda_tips()}
    changed = []
    for summary_path in summaries:
        summary = json.loads(Path(summary_path).read_text(encoding="utf-8"))
        if summary.get("fake_cuda"):
            raise SystemExit(f"{summary_path}: a rehearsal on the fake CUDA device measures nothing")
        on = f"{summary.get('gpu', 'a GPU')} {summary.get('date', '')}".strip()
        for name, seconds in summary.get("seconds", {}).items():
            entry = data["tips"].get(name)
            if entry is None or name not in tips:
                continue
            entry["measured"] = {"s": seconds, "on": on, "version": tip_version_key(tips[name].path)}
            entry["estimate_s"], entry["source"], entry["model_s"] = tip_estimate(
                name, entry.get("calls", []), entry["measured"],
                entry.get("h200_2026_11_26_share_s"), entry.get("h200_2026_11_26_comparisons"),
                data.get("model", {}).get("rounds_a_call"))
            changed.append(name)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tipsite.cudacost",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("update", help="probe the CUDA tips on the fake device, rewrite the file")
    up.add_argument("tips", nargs="*", help="only these tips (default: every CUDA tip)")
    up.add_argument("--no-probe", action="store_true",
                    help="keep the calls found before; probe only tips that have none")
    sub.add_parser("show", help="print each CUDA tip's estimate and its source")
    sub.add_parser("plan", help="the CUDA build's commands and their estimated seconds")
    me = sub.add_parser("measured", help="take the tips' times from a GPU run's summaries")
    me.add_argument("summaries", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.command == "measured":
        print(f"measured: {' '.join(record_measured(args.summaries)) or 'no tip'}")
    if args.command == "update":
        update(only=args.tips or None, reprobe=not args.no_probe)
    if args.command == "plan":
        print(describe([t.name for t in cuda_tips()]))
        return 0
    for name, t in sorted(load().get("tips", {}).items(), key=lambda kv: -kv[1]["estimate_s"]):
        print(f"{t['estimate_s']:7.1f} s  {name}  ({t['source']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark the site build on this machine: ``nox -s bench`` or ``python -m tipsite.bench``.

What it measures, all in its own temporary copy of the sources (``conf/``, ``docs/``,
``gallery/`` and ``tipsite/``, where the extension and the hooks live), so ``build/`` and
``docs/tips`` of the working tree are never touched:

1. **Clean build** (run 1): every tip executed, with the site's own command line
   (:func:`tipsite.build.sphinx_command`). Wall time of the whole build, the tips' own run time
   (sphinx-gallery's ``<tip>.cost.json``), total and per tip, and the overhead between the two.
2. **No-change rebuild** of the same tree. Proof that nothing re-executed: sphinx-gallery's
   "executed 0 out of N ... after excluding M files" line and the unchanged modification times
   of every tip's ``.cost.json`` and ``.result.json``.
3. **One-tip rebuild**: one comment line appended to one tip of the copy. Proof that only that
   tip re-executed: the same line ("executed 1") and only that tip's records rewritten.
4. **Clean builds** 2, 3, ... in fresh copies. For **every** tip and every device it decided
   (records of :mod:`tipsite.records`: ``verdicts`` maps a device to its decision): the verdict
   of each run, whether it changed, the key figure of each run with the interval and rounds the
   tip reported, and whether every run's figure lies inside every run's interval.

``--load N`` keeps N cores busy with N CPU-bound processes (a Python busy loop each) during
every build: started before the build, stopped after it, their CPU time recorded. The target
"0 verdict changes" is met only by 3 clean builds under ``--load 1``.

Wall times are taken with ``time.perf_counter`` around the build process. Around each build it
records the load average and how much CPU the build, the load processes and every other
process used (``/proc/stat``), so the figures come with honest context on a shared machine.

The figures go to ``docs/_data/bench.json``; the "How this site is built" page renders them with
the ``tips-bench`` directive (:mod:`tipsite.sphinxext.benchpage`). ``--render`` prints the
README's summary from the data file without building anything; ``--tips`` restricts the run to
a few tips (for trying the benchmark out; do not publish such a run).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import fnmatch
import json
import math
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from conf import settings
from tipsite import build, devices, records, tipmeta

SCHEMA = "tips-bench/2"
DATA_FILE = settings.DOCS_DIR / "_data" / "bench.json"
# What a build needs from the repository: configuration, Sphinx source, tips, the build's programs.
SOURCES = ("conf", "docs", "gallery", "tipsite")

# The targets (issues 7, 11 and 18), for this project's 2-core machine.
TARGET_CLEAN_S = 300.0
TARGET_NOCHANGE_S = 10.0
TARGET_ONE_TIP_EXTRA_S = 15.0
TARGET_KEY_PCT = 5.0
# "0 verdict changes across 3 clean builds with one core kept busy."
TARGET_STABILITY_RUNS = 3
TARGET_STABILITY_LOAD = 1
# A build counts as loaded when this fraction of the asked cores was busy beside it.
LOADED_FRACTION = 0.8

# Build outputs inside docs/ (tipsite.build.OUTPUTS) that a clean build must not inherit.
_DOCS_OUTPUTS = {rel.split("/", 1)[1] for rel in build.OUTPUTS if rel.startswith("docs/")}
_EXECUTED_RE = re.compile(
    r"Sphinx-Gallery successfully executed (\d+) out of (\d+) file.*?"
    r"after excluding (\d+) file", re.DOTALL)
EDIT_LINE = "# bench: a comment line appended to time a one-tip rebuild\n"
# The CPU-bound process of --load (pure Python, no I/O, one core). It must not outlive the
# benchmark, even a killed one: on Linux it asks the kernel for SIGTERM when its parent dies
# (PR_SET_PDEATHSIG), then checks that the parent (argv[1]) did not die before it asked. Done
# by the child itself: a preexec_fn would run Python between fork and exec, which can
# deadlock in a parent with threads (a pytest-xdist worker).
BUSY_LOOP = """
import os, signal, sys
try:
    import ctypes
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(0)
while True:
    pass
"""


class BenchError(RuntimeError):
    pass


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# --- the source tree -------------------------------------------------------------------------

def snapshot_sources(dest: Path, tips: list[str] | None = None, commit: str | None = None,
                     root: Path = settings.ROOT) -> Path:
    """Copy ``SOURCES`` of ``root`` (docs/ without build outputs) to ``dest``; return ``dest``.

    Every run copies from this one snapshot, so a file saved while the benchmark runs cannot make
    one run differ from another. ``commit`` takes the sources from that commit (``git archive``)
    instead of the working tree. ``tips`` (fnmatch patterns) keeps only matching tips.
    """
    docs = (root / "docs").resolve()

    def ignore(directory: str, names: list[str]) -> set[str]:
        out = {n for n in names if n == "__pycache__" or n.endswith(".pyc")}
        if Path(directory).resolve() == docs:
            out |= {n for n in names if n in _DOCS_OUTPUTS}
        return out

    if commit:
        dest.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", "--format=tar", commit, *SOURCES],
                                 cwd=root, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    else:
        dest.mkdir(parents=True)
        for name in SOURCES:
            shutil.copytree(root / name, dest / name, ignore=ignore)
    if tips:
        for path in tipmeta.tip_files(dest / "gallery"):
            if not any(fnmatch.fnmatch(path.stem, pat) for pat in tips):
                path.unlink()
    if not tipmeta.tip_files(dest / "gallery"):
        raise BenchError(f"no tips match {tips}")
    return dest


# --- the load and the build ------------------------------------------------------------------

class CpuLoad:
    """``with CpuLoad(n):`` keeps ``n`` cores busy, one CPU-bound process each.

    Started on entry, terminated (killed if need be) and reaped on exit. :meth:`cpu_s` is the
    CPU time the processes have used so far, read from ``/proc`` while they still run.
    """

    def __init__(self, cores: int):
        self.cores = cores
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> CpuLoad:
        try:
            for _ in range(self.cores):
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-c", BUSY_LOOP, str(os.getpid())], stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def running(self) -> int:
        return sum(p.poll() is None for p in self.procs)

    def cpu_s(self) -> float:
        total = 0.0
        for p in self.procs:
            try:
                fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
        return total

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _cpu_busy_s() -> float:
    """CPU seconds all processes on this machine have been busy since boot (all cores)."""
    with open("/proc/stat", encoding="ascii") as fh:
        vals = [int(v) for v in fh.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    return (sum(vals[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def build_env() -> dict[str, str]:
    """The copy's conf/ and tipsite/ must be the ones imported, not the checkout's (PYTHONPATH);
    and the benchmark times the default build: no TIPS_* switch (shards, intersphinx, result
    sets), as ``nox -s docs`` does."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("TIPS_")}


# A subset build (--tips) leaves out pages that other pages link to (the quick reference):
# only those broken links are allowed; every other warning still stops the build.
SUBSET_OPTIONS = ("-D", "suppress_warnings=ref.doc")


def run_build(root: Path, label: str, logdir: Path, load: int = 0, extra: tuple[str, ...] = (),
              command: list[str] | None = None) -> dict[str, Any]:
    """Build ``root`` (``command`` replaces the site's, for tests) with ``load`` cores kept busy;
    wall time, what sphinx-gallery executed, the load and the CPU used around it."""
    cmd = command or [*build.sphinx_command(root=root), *extra]
    with CpuLoad(load) as burner:
        load_before = os.getloadavg()
        busy0, ours0, burnt0 = _cpu_busy_s(), _children_cpu_s(), burner.cpu_s()
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, check=False, cwd=root, env=build_env(), capture_output=True, text=True)
        wall = time.perf_counter() - t0
        # Read while the load still runs: once reaped, its CPU time would count as the build's.
        busy, ours, burnt = _cpu_busy_s() - busy0, _children_cpu_s() - ours0, burner.cpu_s() - burnt0
        load_after = os.getloadavg()
        still_busy = burner.running()
    log = logdir / f"{label}.log"
    log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr, encoding="utf-8")
    if proc.returncode != 0:
        raise BenchError(f"{label}: the build failed ({proc.returncode}); log {log}\n"
                         + (proc.stdout + proc.stderr)[-3000:])
    m = _EXECUTED_RE.search(proc.stdout)
    if m is None:
        raise BenchError(f"{label}: no sphinx-gallery summary line in the output; log {log}")
    if still_busy != load:
        raise BenchError(f"{label}: {load - still_busy} of the {load} load processes stopped during the build")
    executed, total, cached = (int(g) for g in m.groups())
    return {
        "label": label,
        "wall_s": round(wall, 2),
        "executed": executed,
        "selected": total,
        "cached": cached,
        # sphinx-gallery's summary, without the lines naming its filename patterns.
        "gallery_line": (f"Sphinx-Gallery successfully executed {executed} out of {total} files"
                         f" after excluding {cached} that had previously been run (based on MD5)"),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        # Average cores in use during the build: by this build (the build process and what it
        # ran), by the load processes of --load, and by every other process on the machine.
        "load_processes": load,
        "cores_used_by_build": round(ours / wall, 2),
        "cores_used_by_load": round(burnt / wall, 2),
        "cores_used_by_others": round(max(0.0, busy - ours - burnt) / wall, 2),
        "cpu_count": os.cpu_count() or 1,
    }


# --- what a build left -----------------------------------------------------------------------

def tip_outputs(root: Path) -> dict[str, dict[str, Any]]:
    """tip name -> its run time (s), memory (MiB), record and their files' mtimes, in ``root``."""
    out: dict[str, dict[str, Any]] = {}
    for cost in sorted((root / "docs" / settings.TIPS_OUT_DIR.name).glob("*/*.cost.json")):
        name = cost.name[: -len(".cost.json")]
        data = json.loads(cost.read_text(encoding="utf-8"))
        target = cost.with_name(name + ".py")
        res = records.record_path(target)
        try:
            record = records.read_record(target)
        except records.RecordError as exc:
            raise BenchError(str(exc)) from None
        out[name] = {
            "time_s": float(data["time"]),
            "memory_mib": float(data["memory"]),
            "cost_mtime": cost.stat().st_mtime_ns,
            "result_mtime": res.stat().st_mtime_ns if res.exists() else None,
            "result": record,
        }
    return out


def changed_tips(before: dict, after: dict) -> list[str]:
    """Tips whose cost or result record was rewritten between two snapshots of the outputs."""
    return sorted(n for n in after if n not in before
                  or after[n]["cost_mtime"] != before[n]["cost_mtime"]
                  or after[n]["result_mtime"] != before[n]["result_mtime"])


# --- the scenarios ---------------------------------------------------------------------------

def clean_run(snapshot: Path, work: Path, i: int, load: int = 0,
              extra: tuple[str, ...] = ()) -> tuple[Path, dict[str, Any], dict]:
    root = work / f"run{i}"
    shutil.copytree(snapshot, root)
    run = run_build(root, f"clean{i}", work, load, extra)
    outputs = tip_outputs(root)
    if run["executed"] != len(outputs) or run["cached"] != 0:
        raise BenchError(f"clean run {i}: expected every tip executed, got {run['gallery_line']}")
    tips_s = sum(o["time_s"] for o in outputs.values())
    run.update({
        "tips_s": round(tips_s, 2),
        "overhead_s": round(run["wall_s"] - tips_s, 2),
        "tip_times_s": {n: round(o["time_s"], 2) for n, o in outputs.items()},
    })
    return root, run, outputs


def no_change_rebuild(root: Path, work: Path, before: dict, load: int = 0,
                      extra: tuple[str, ...] = ()) -> dict[str, Any]:
    run = run_build(root, "nochange", work, load, extra)
    after = tip_outputs(root)
    rewritten = changed_tips(before, after)
    run.update({
        "rewritten_records": rewritten,
        "proof": (f"{run['gallery_line']}; "
                  f"{len(after) - len(rewritten)} of {len(after)} tips' .cost.json and "
                  f".result.json kept their modification times"),
        "nothing_executed": run["executed"] == 0 and not rewritten,
    })
    return run


def one_tip_rebuild(root: Path, work: Path, before: dict, tip_name: str, load: int = 0,
                    extra: tuple[str, ...] = ()) -> dict[str, Any]:
    matches = sorted((root / "gallery").glob(f"*/{tip_name}.py"))
    if len(matches) != 1:
        raise BenchError(f"tip to edit not found (or found twice): {tip_name}")
    with matches[0].open("a", encoding="utf-8") as fh:  # the copy's file, never the checkout's
        fh.write(EDIT_LINE)
    run = run_build(root, "onetip", work, load, extra)
    after = tip_outputs(root)
    rewritten = changed_tips(before, after)
    tip_s = after[tip_name]["time_s"]
    run.update({
        "edited_tip": tip_name,
        "edit": EDIT_LINE.strip(),
        "tip_s": round(tip_s, 2),
        "overhead_s": round(run["wall_s"] - tip_s, 2),
        "rewritten_records": rewritten,
        "proof": (f"{run['gallery_line']}; only "
                  f"{', '.join(rewritten) or 'no tip'}'s records were rewritten"),
        "only_that_tip": run["executed"] == 1 and rewritten == [tip_name],
    })
    return run


# --- the bookkeeping: stability and cost -------------------------------------------------------

def _decisions(output: dict | None) -> dict[str, dict]:
    record = (output or {}).get("result") or {}
    return {d: v for d, v in (record.get("verdicts") or {}).items() if isinstance(v, dict)}


def _spread(values: list[float]) -> tuple[float, float | None, float | None]:
    """Median, largest deviation from it and range, both in % of the median (None around 0)."""
    med = statistics.median(values)
    if max(values) == min(values):
        return med, 0.0, 0.0  # identical in every run (e.g. exact byte counts, even 0)
    if med == 0:
        return med, None, None  # moved around 0: no relative spread; counts as moved
    dev = max(abs(v - med) for v in values) / abs(med) * 100
    return med, dev, (max(values) - min(values)) / abs(med) * 100


def stability(tips: list[tipmeta.Tip], runs: list[dict[str, dict]]) -> list[dict[str, Any]]:
    """One row per tip and device it decided in any clean run: verdicts and key figure per run.

    Every tip counts, whatever its kind: a behaviour tip's verdict may not flip either. A device
    decided in one run and not in another is a change. A tip that decided no device on this
    machine (e.g. a CUDA-only claim on a CPU machine) gets one row with ``device`` None.
    """
    rows = []
    for tip in tips:
        per_run = [_decisions(r.get(tip.name)) for r in runs]
        devices = [d for d in records.devices() if any(d in p for p in per_run)]
        devices += sorted({d for p in per_run for d in p} - set(devices))
        base = {"tip": tip.name, "topic": tip.topic, "kind": tip.kind}
        record = next((r[tip.name]["result"] for r in runs if r.get(tip.name) and r[tip.name].get("result")), None)
        if record is not None and all(k in record for k in records.VERSION_KEYS):
            base["version"] = {k: record[k] for k in records.VERSION_KEYS}  # which tip the rows measured
        if not devices:
            rows.append({**base, "device": None, "verdicts": [None] * len(runs), "verdict_changed": False,
                         "key": None, "values": [], "within_target": None, "inside_intervals": None,
                         "note": f"decided no device on this machine (it measures {', '.join(tip.devices)})"})
            continue
        for device in devices:
            decisions = [p.get(device) for p in per_run]
            verdicts = [d["verdict"] if d else None for d in decisions]
            row: dict[str, Any] = {**base, "device": device, "verdicts": verdicts,
                                   "verdict_changed": len(set(verdicts)) > 1}
            keys = [d.get("key") if d else None for d in decisions]
            if any(not isinstance(k, dict) or not _finite(k.get("value")) for k in keys):
                row.update({"key": None, "values": [], "within_target": None, "inside_intervals": None,
                            "note": "no key figure in every run; only the verdict is compared"})
                rows.append(row)
                continue
            values = [float(k["value"]) for k in keys]
            med, dev, rng = _spread(values)
            intervals = [[k.get("low"), k.get("high")] for k in keys]
            inside = missed = None
            if all(_finite(lo) and _finite(hi) for lo, hi in intervals):
                # Does every run's figure sit inside the interval every run reported? The interval
                # is the tip's own statement of its noise: a figure of another run outside it
                # means the runs differ more than the tip says.
                missed = sum(not (lo <= v <= hi) for lo, hi in intervals for v in values)
                inside = missed == 0
            row.update({
                "key": keys[0]["name"], "unit": keys[0]["unit"],
                "values": [round(v, 4) for v in values],
                "intervals": [[round(lo, 6), round(hi, 6)] if inside is not None else [lo, hi]
                              for lo, hi in intervals],
                "rounds": [k.get("rounds") for k in keys],
                "median": round(med, 4),
                "max_dev_pct": None if dev is None else round(dev, 1),
                "range_pct": None if rng is None else round(rng, 1),
                "inside_intervals": inside,
                "intervals_missed": missed,
                "within_target": dev is not None and dev <= TARGET_KEY_PCT,
            })
            rows.append(row)
    return rows


def tip_costs(tips: list[tipmeta.Tip], runs: list[dict[str, Any]],
              outputs: list[dict[str, dict]]) -> list[dict[str, Any]]:
    """Each tip's own run time over the clean runs, slowest first, with what it measured:
    the comparisons of its decisions (sweep points) and their rounds."""
    total = statistics.median(r["tips_s"] for r in runs) if runs else 0.0
    rows = []
    for tip in tips:
        times = [r["tip_times_s"][tip.name] for r in runs if tip.name in r.get("tip_times_s", {})]
        if not times:
            continue
        decisions = [_decisions(o.get(tip.name)) for o in outputs] or [{}]
        comparisons = [[c for d in ds.values() for c in d.get("comparisons") or []] for ds in decisions]
        med = statistics.median(times)
        rows.append({
            "tip": tip.name, "topic": tip.topic, "kind": tip.kind,
            "times_s": times, "median_s": round(med, 2),
            "share_pct": round(med / total * 100, 1) if total else None,
            "comparisons": len(comparisons[0]),
            "rounds": round(statistics.median(sum(len(c.get("ratios") or []) for c in cs)
                                              for cs in comparisons)),
        })
    return sorted(rows, key=lambda r: (-r["median_s"], r["tip"]))


def targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with the measured figure and whether it was met (``met`` is a bool)."""
    runs, nc, ot = data["clean_runs"], data.get("no_change_rebuild"), data.get("one_tip_rebuild")
    load = (data.get("load") or {}).get("cores", 0)
    worst = max(r["wall_s"] for r in runs)
    rows = [
        {"what": "clean build, every tip executed", "target": f"<= {TARGET_CLEAN_S:.0f} s",
         "measured": f"{worst:.1f} s (slowest of {len(runs)} run{'s' if len(runs) != 1 else ''})",
         "met": worst <= TARGET_CLEAN_S}]
    if nc:
        rows.append(
            {"what": "rebuild, nothing changed", "target": f"< {TARGET_NOCHANGE_S:.0f} s, executes nothing",
             "measured": f"{nc['wall_s']:.1f} s, executed {nc['executed']}",
             "met": nc["wall_s"] < TARGET_NOCHANGE_S and nc["nothing_executed"]})
    if ot:
        rows.append(
            {"what": f"rebuild after editing {ot['edited_tip']}",
             "target": f"<= its run time + {TARGET_ONE_TIP_EXTRA_S:.0f} s, executes only it",
             "measured": f"{ot['wall_s']:.1f} s (tip {ot['tip_s']:.1f} s + {ot['overhead_s']:.1f} s), "
                         f"executed {ot['executed']}",
             "met": ot["wall_s"] <= ot["tip_s"] + TARGET_ONE_TIP_EXTRA_S and ot["only_that_tip"]})

    rows_s = data["stability"]
    decided = [r for r in rows_s if r["device"] is not None]
    changed = [f"{r['tip']} ({records.device_word(r['device'])})" for r in decided if r["verdict_changed"]]
    under = f"{load} core{'s' if load != 1 else ''} kept busy" if load else "no added load"
    condition = []
    if len(runs) < TARGET_STABILITY_RUNS:
        condition.append(f"{len(runs)} clean build{'s' if len(runs) != 1 else ''}, not {TARGET_STABILITY_RUNS}")
    if load < TARGET_STABILITY_LOAD:
        condition.append(f"run without --load {TARGET_STABILITY_LOAD}")
    else:
        # The load must have been there: cores busy beside the build (the load processes and
        # everything else), on average over each build.
        beside = min(r.get("cores_used_by_load", 0) + r.get("cores_used_by_others", 0) for r in runs)
        if beside < LOADED_FRACTION * TARGET_STABILITY_LOAD:
            condition.append(f"only {beside:.2f} cores were busy beside the build in one of them")
    rows.append({
        "what": "verdict changes across clean builds, every tip and device",
        "target": f"0 across {TARGET_STABILITY_RUNS} clean builds with --load {TARGET_STABILITY_LOAD}",
        "measured": (f"{len(changed)} of {len(decided)} tip/device verdicts changed across {len(runs)} "
                     f"build{'s' if len(runs) != 1 else ''} ({under})"
                     + (f": {', '.join(changed)}" if changed else "")
                     + (f"; not the target's condition: {'; '.join(condition)}" if condition else "")),
        "met": not changed and not condition,
    })
    keyed = [r for r in decided if r.get("values")]
    moved = [r for r in keyed if not r["within_target"]]
    uncovered = [r for r in moved if r["inside_intervals"] is not True]

    def names(rs):
        return ", ".join(f"{r['tip']} ({records.device_word(r['device'])})" for r in rs)

    rows.append({
        "what": "key figure of each tip and device across clean builds",
        "target": f"within ±{TARGET_KEY_PCT:.0f}% of the median, or every run inside every run's interval",
        "measured": ("one build: nothing to compare" if len(runs) < 2 else
                     f"{len(keyed) - len(moved)} of {len(keyed)} within ±{TARGET_KEY_PCT:.0f}%"
                     + (f"; moved more: {names(moved)}" if moved else "")
                     + (f"; outside the intervals the tips report: {names(uncovered)}" if uncovered
                        else "; every run inside every run's interval" if moved else "")),
        "met": len(runs) >= 2 and not uncovered,
    })
    return rows


def summarize(data: dict[str, Any]) -> dict[str, Any]:
    runs = data["clean_runs"]
    walls = [r["wall_s"] for r in runs]
    return {
        "clean_build_s": {"median": round(statistics.median(walls), 1), "min": min(walls), "max": max(walls)},
        "tips_s_median": round(statistics.median(r["tips_s"] for r in runs), 1),
        "overhead_s_median": round(statistics.median(r["overhead_s"] for r in runs), 1),
        "verdict_changes": sum(bool(r["verdict_changed"]) for r in data["stability"]),
        "decisions": sum(r["device"] is not None for r in data["stability"]),
    }


def _say(run: dict[str, Any]) -> None:
    extra = f", tips {run['tips_s']:.1f} s" if "tips_s" in run else ""
    load = (f", load processes used {run['cores_used_by_load']:.2f} cores" if run["load_processes"] else "")
    print(f"bench: {run['label']}: {run['wall_s']:.1f} s{extra}, executed {run['executed']}"
          f"/{run['selected']} (cached {run['cached']}), load average {run['load_before'][0]:.2f}"
          f" -> {run['load_after'][0]:.2f}, build {run['cores_used_by_build']:.2f} cores{load},"
          f" other processes {run['cores_used_by_others']:.2f} cores", flush=True)


# --- machine and provenance ------------------------------------------------------------------

def machine() -> dict[str, Any]:
    import torch

    return {
        "cpu": devices.cpu_model(),
        "cpu_flags": devices.cpu_flags(),
        "cores": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "torch": torch.__version__,
        "cuda": "cuda" in devices.available(),
        # each device of the machine, as a build's records describe it (its machine class)
        "hosts": devices.hosts(),
        "python": platform.python_version(),
        "tips_threads": settings.TIPS_THREADS,
    }


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=settings.ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    started = _dt.datetime.now(_dt.UTC)
    work = Path(tempfile.mkdtemp(prefix="tips-bench-"))
    print(f"bench: working in {work}", flush=True)
    load = args.load
    extra = SUBSET_OPTIONS if args.tips else ()
    try:
        snapshot = snapshot_sources(work / "src", args.tips, args.from_commit)
        tips = tipmeta.read_all(snapshot / "gallery")
        names = [t.name for t in tips]
        edit = args.edit_tip if args.edit_tip in names else (
            "tip_inference_mode" if "tip_inference_mode" in names else names[0])
        print(f"bench: {len(tips)} tips; {args.runs} clean run(s)"
              + (f"; {load} core(s) kept busy during every build" if load else ""), flush=True)
        fingerprint = build.execution_fingerprint(snapshot)

        runs, outputs = [], []
        nochange = onetip = None
        incomplete = None
        try:
            root1, run, out = clean_run(snapshot, work, 1, load, extra)
            runs.append(run)
            outputs.append(out)
            _say(run)
            if not args.skip_rebuilds:
                nochange = no_change_rebuild(root1, work, out, load, extra)
                _say(nochange)
                onetip = one_tip_rebuild(root1, work, tip_outputs(root1), edit, load, extra)
                _say(onetip)
            for i in range(2, args.runs + 1):
                _, run, out = clean_run(snapshot, work, i, load, extra)
                runs.append(run)
                outputs.append(out)
                _say(run)
        except (BenchError, KeyboardInterrupt) as exc:
            # Keep what was measured: a stopped benchmark still reports its finished builds.
            if not runs:
                raise
            incomplete = f"stopped after {len(runs)} clean run(s): {type(exc).__name__} {exc}".strip()
            print(f"bench: {incomplete}", flush=True)
    finally:
        if args.keep:
            print(f"bench: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    data = {
        "schema": SCHEMA,
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "finished": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _git("rev-parse", "--short", args.from_commit or "HEAD"),
        "uncommitted_sources": (False if args.from_commit else
                                bool(_git("status", "--porcelain", "--", *SOURCES))),
        "execution_fingerprint": fingerprint,
        "subset": args.tips or None,
        "machine": machine(),
        "command": " ".join(["sphinx-build", *build.sphinx_args(root=Path(".")), *extra]),
        "load": {"cores": load, "process": "a Python busy loop per core, started before and "
                                           "stopped after every build" if load else None},
        "tips": len(tips),
        "tips_by_kind": {k: sum(t.kind == k for t in tips) for k in sorted({t.kind for t in tips})},
        "clean_runs": runs,
        "no_change_rebuild": nochange,
        "one_tip_rebuild": onetip,
        "tip_costs": tip_costs(tips, runs, outputs),
        "stability": stability(tips, outputs),
        "incomplete": incomplete,
    }
    data["targets"] = targets(data)
    data["summary"] = summarize(data)
    return data


def is_current(data: Any) -> bool:
    return isinstance(data, dict) and data.get("schema") == SCHEMA


def write_data(data: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"bench: figures written to {out}")


def _stop(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _stop)
    parser = argparse.ArgumentParser(prog="python -m tipsite.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="clean builds (default 3)")
    parser.add_argument("--load", type=int, default=0, metavar="N",
                        help="keep N cores busy with a CPU-bound process during every build")
    parser.add_argument("--tips", nargs="+", metavar="PATTERN",
                        help="build only tips whose name matches (fnmatch); for trying it out")
    parser.add_argument("--from-commit", metavar="REV",
                        help="build the sources of this commit (git archive), not the working tree")
    parser.add_argument("--edit-tip", default="tip_inference_mode",
                        help="tip to edit for the one-tip rebuild (default: the exemplar)")
    parser.add_argument("--skip-rebuilds", action="store_true",
                        help="clean builds only: no no-change and one-tip rebuilds")
    parser.add_argument("--out", type=Path, default=DATA_FILE, help=f"data file (default {DATA_FILE})")
    parser.add_argument("--keep", action="store_true", help="keep the temporary build trees")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if not 0 <= args.load <= (os.cpu_count() or 1):
        parser.error(f"--load must be between 0 and the {os.cpu_count()} cores of this machine")
    data = run_bench(args)
    write_data(data, args.out)
    print("bench: the README's build-time line: python -m tipsite.sphinxext.benchpage " + str(args.out))
    missed = [t["what"] for t in data["targets"] if not t["met"]]
    if missed:
        print("bench: targets missed: " + "; ".join(missed))
    return 1 if missed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())

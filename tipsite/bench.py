"""Benchmark the site build on this machine: ``nox -s bench`` or ``python -m tipsite.bench``.

What it measures, all in its own temporary copy of the sources (``conf/``, ``docs/``,
``gallery/``), so ``build/html`` and ``docs/tips`` of the working tree are never touched:

1. **Clean build** (run 1): every tip executed. Wall time of the whole ``sphinx-build``, the sum
   of the tips' own run times (sphinx-gallery caches each tip's time in
   ``docs/tips/<topic>/<tip>.cost.json``) and the overhead between the two.
2. **No-change rebuild** of the same tree. Proof that nothing re-executed: sphinx-gallery's
   "executed 0 out of N ... after excluding M files" line and the unchanged modification times
   of every tip's ``.cost.json`` and ``.result.json``.
3. **One-tip rebuild**: one comment line appended to one tip of the copy. Proof that only that
   tip re-executed: the same line ("executed 1") and only that tip's records rewritten.
4. **Clean builds** 2 and 3 in fresh copies. For every tip of kind ``speed`` or ``memory``: the
   key figure (``RESULT["key"]["value"]``) of the three runs, its spread across runs, and
   whether the verdict changed between runs.

Wall times are taken with ``time.perf_counter`` around the ``sphinx-build`` process, which runs
with the same arguments as the nox ``docs`` session. Around each build it records the load
average and how much CPU other processes used meanwhile (from ``/proc/stat``), so the figures
come with honest context on a shared machine.

The figures go to ``docs/_data/bench.json`` and the "How this site is built" page
(``docs/how_built.rst``) is rendered from them. ``--render`` re-renders the page (and prints the
README summary) from the data file without building anything; ``--tips`` restricts the run to a
few tips (for trying the benchmark out; do not publish such a run).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import fnmatch
import json
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
from tipsite import gallery, tipmeta

DATA_FILE = settings.DOCS_DIR / "_data" / "bench.json"
PAGE_FILE = settings.DOCS_DIR / "how_built.rst"

# The targets of issue 7, for this project's 2-core machine.
TARGET_CLEAN_S = 300.0
TARGET_NOCHANGE_S = 10.0
TARGET_ONE_TIP_EXTRA_S = 15.0
TARGET_RATIO_PCT = 5.0
TIMED_KINDS = ("speed", "memory")

# Build outputs inside docs/ that a clean build must not inherit from the working tree.
_DOCS_OUTPUTS = {settings.TIPS_OUT_DIR.name, "generated", "sg_execution_times.rst", "_build"}
_EXECUTED_RE = re.compile(
    r"Sphinx-Gallery successfully executed (\d+) out of (\d+) file.*?"
    r"after excluding (\d+) file", re.DOTALL)
EDIT_LINE = "# bench: a comment line appended to time a one-tip rebuild\n"


class BenchError(RuntimeError):
    pass


# --- the source tree and the build -----------------------------------------------------------

def snapshot_sources(dest: Path, tips: list[str] | None = None, commit: str | None = None) -> Path:
    """Copy conf/, docs/ (without build outputs) and gallery/ to ``dest``; return ``dest``.

    Every run copies from this one snapshot, so a tip saved while the benchmark runs cannot make
    one run differ from another. ``commit`` takes the sources from that commit (``git archive``)
    instead of the working tree. ``tips`` (fnmatch patterns) keeps only matching tips.
    """
    def ignore_docs(directory: str, names: list[str]) -> set[str]:
        if Path(directory).resolve() == settings.DOCS_DIR.resolve():
            return {n for n in names if n in _DOCS_OUTPUTS}
        return set()

    if commit:
        dest.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", "--format=tar", commit, "conf", "docs", "gallery"],
                                 cwd=settings.ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    else:
        caches = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(settings.CONF_DIR, dest / "conf", ignore=caches)
        shutil.copytree(settings.DOCS_DIR, dest / "docs",
                        ignore=lambda d, n: ignore_docs(d, n) | caches(d, n))
        shutil.copytree(settings.GALLERY_DIR, dest / "gallery", ignore=caches)
    if tips:
        for path in tipmeta.tip_files(dest / "gallery"):
            if not any(fnmatch.fnmatch(path.stem, pat) for pat in tips):
                path.unlink()
    if not tipmeta.tip_files(dest / "gallery"):
        raise BenchError(f"no tips match {tips}")
    return dest


def sphinx_command(root: Path) -> list[str]:
    """The nox ``docs`` session's sphinx-build command line (noxfile.sphinx_build), for ``root``."""
    exe = Path(sys.executable).with_name("sphinx-build")
    prog = [str(exe)] if exe.exists() else [sys.executable, "-m", "sphinx"]
    return [*prog, "-b", "html", "-W", "--keep-going", "-j", "1",
            "-d", str(root / "build" / "doctrees"), str(root / "docs"), str(root / "build" / "html")]


def _cpu_busy_s() -> float:
    """CPU seconds all processes on this machine have been busy since boot (all cores)."""
    with open("/proc/stat", encoding="ascii") as fh:
        vals = [int(v) for v in fh.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    return (sum(vals[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _tip_records(root: Path) -> dict[str, dict[str, Any]]:
    """tip name -> its cost (time s, memory MiB), result record and their mtimes, from ``root``."""
    out: dict[str, dict[str, Any]] = {}
    for cost in sorted((root / "docs" / settings.TIPS_OUT_DIR.name).glob("*/*.cost.json")):
        name = cost.name[: -len(".cost.json")]
        data = json.loads(cost.read_text(encoding="utf-8"))
        res = cost.with_name(name + gallery.RESULT_SUFFIX)
        out[name] = {
            "time_s": float(data["time"]),
            "memory_mib": float(data["memory"]),
            "cost_mtime": cost.stat().st_mtime_ns,
            "result_mtime": res.stat().st_mtime_ns if res.exists() else None,
            "result": json.loads(res.read_text(encoding="utf-8")) if res.exists() else None,
        }
    return out


def run_build(root: Path, label: str, logdir: Path) -> dict[str, Any]:
    """Run sphinx-build on ``root``; wall time, what sphinx-gallery executed, load around it."""
    cmd = sphinx_command(root)
    # The copy's conf/ must be the one imported, not the checkout's (PYTHONPATH); and the
    # benchmark times the default build: no TIPS_* switch (shards, intersphinx, result sets).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("TIPS_")}
    load_before = os.getloadavg()
    busy0, ours0 = _cpu_busy_s(), _children_cpu_s()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, check=False, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    busy, ours = _cpu_busy_s() - busy0, _children_cpu_s() - ours0
    load_after = os.getloadavg()
    log = logdir / f"{label}.log"
    log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr, encoding="utf-8")
    if proc.returncode != 0:
        raise BenchError(f"{label}: sphinx-build failed ({proc.returncode}); log {log}\n"
                         + (proc.stdout + proc.stderr)[-3000:])
    m = _EXECUTED_RE.search(proc.stdout)
    if m is None:
        raise BenchError(f"{label}: no sphinx-gallery summary line in the output; log {log}")
    executed, total, cached = (int(g) for g in m.groups())
    ncpu = os.cpu_count() or 1
    others = max(0.0, busy - ours)
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
        # Average cores in use during the build: by this build (sphinx-build and what it ran)
        # and by every other process on the machine.
        "cores_used_by_build": round(ours / wall, 2),
        "cores_used_by_others": round(others / wall, 2),
        "cpu_count": ncpu,
    }


# --- the three scenarios ---------------------------------------------------------------------

def _tip_sum(records: dict[str, dict[str, Any]], names=None) -> float:
    return sum(r["time_s"] for n, r in records.items() if names is None or n in names)


def clean_run(snapshot: Path, work: Path, i: int) -> tuple[Path, dict[str, Any], dict]:
    root = work / f"run{i}"
    shutil.copytree(snapshot, root)
    build = run_build(root, f"clean{i}", work)
    records = _tip_records(root)
    if build["executed"] != len(records) or build["cached"] != 0:
        raise BenchError(f"clean run {i}: expected every tip executed, got {build['gallery_line']}")
    tips_s = _tip_sum(records)
    build.update({
        "tips_s": round(tips_s, 2),
        "overhead_s": round(build["wall_s"] - tips_s, 2),
        "tip_times_s": {n: round(r["time_s"], 2) for n, r in records.items()},
    })
    return root, build, records


def changed_tips(before: dict, after: dict) -> list[str]:
    """Tips whose cost or result record was rewritten between two snapshots of the records."""
    return sorted(n for n in after if n not in before
                  or after[n]["cost_mtime"] != before[n]["cost_mtime"]
                  or after[n]["result_mtime"] != before[n]["result_mtime"])


def no_change_rebuild(root: Path, work: Path, before: dict) -> dict[str, Any]:
    build = run_build(root, "nochange", work)
    after = _tip_records(root)
    rewritten = changed_tips(before, after)
    build.update({
        "rewritten_records": rewritten,
        "proof": (f"sphinx-gallery: {build['gallery_line']}; "
                  f"{len(after) - len(rewritten)} of {len(after)} tips' .cost.json and "
                  f".result.json kept their modification times"),
        "nothing_executed": build["executed"] == 0 and not rewritten,
    })
    return build


def one_tip_rebuild(root: Path, work: Path, before: dict, tip_name: str) -> dict[str, Any]:
    matches = sorted((root / "gallery").glob(f"*/{tip_name}.py"))
    if len(matches) != 1:
        raise BenchError(f"tip to edit not found (or found twice): {tip_name}")
    with matches[0].open("a", encoding="utf-8") as fh:  # the copy's file, never the checkout's
        fh.write(EDIT_LINE)
    build = run_build(root, "onetip", work)
    after = _tip_records(root)
    rewritten = changed_tips(before, after)
    tip_s = after[tip_name]["time_s"]
    build.update({
        "edited_tip": tip_name,
        "edit": EDIT_LINE.strip(),
        "tip_s": round(tip_s, 2),
        "overhead_s": round(build["wall_s"] - tip_s, 2),
        "rewritten_records": rewritten,
        "proof": (f"sphinx-gallery: {build['gallery_line']}; only "
                  f"{', '.join(rewritten) or 'no tip'}'s records were rewritten"),
        "only_that_tip": build["executed"] == 1 and rewritten == [tip_name],
    })
    return build


def ratio_stability(tips: list[tipmeta.Tip], runs: list[dict[str, dict]]) -> list[dict[str, Any]]:
    """Key figure and verdict of every speed/memory tip across the clean runs."""
    rows = []
    for tip in tips:
        if tip.kind not in TIMED_KINDS:
            continue
        results = [r[tip.name]["result"] for r in runs]
        keys = [res.get("key") if res else None for res in results]
        verdicts = [res["verdict"] if res else None for res in results]
        row: dict[str, Any] = {"tip": tip.name, "topic": tip.topic, "kind": tip.kind,
                               "verdicts": verdicts, "verdict_changed": len(set(verdicts)) > 1}
        if any(k is None for k in keys):
            row.update({"key": None, "values": [], "within_target": None,
                        "note": "no key figure in RESULT; only the verdict is compared"})
            rows.append(row)
            continue
        values = [float(k["value"]) for k in keys]
        med = statistics.median(values)
        if max(values) == min(values):
            dev = rng = 0.0  # identical in every run (e.g. exact byte counts, even 0)
        elif med == 0:
            dev = rng = None  # moved around 0: no relative spread; counts as moved
        else:
            dev = max(abs(v - med) for v in values) / abs(med) * 100
            rng = (max(values) - min(values)) / abs(med) * 100
        lows = [k.get("low") for k in keys]
        highs = [k.get("high") for k in keys]
        inside = None
        if all(x is not None for x in lows + highs):
            # Does the run-to-run range sit inside the spread the tip itself reports?
            inside = min(values) >= min(lows) and max(values) <= max(highs)
        row.update({
            "key": keys[0]["name"], "unit": keys[0]["unit"],
            "values": [round(v, 4) for v in values],
            "median": round(med, 4),
            "max_dev_pct": None if dev is None else round(dev, 1),
            "range_pct": None if rng is None else round(rng, 1),
            "reported_bands": [[lo, hi] for lo, hi in zip(lows, highs)],
            "runs_inside_reported_band": inside,
            "within_target": dev is not None and dev <= TARGET_RATIO_PCT,
        })
        rows.append(row)
    return rows


# --- machine and provenance ------------------------------------------------------------------

def machine() -> dict[str, Any]:
    import torch

    return {
        "cpu": gallery.cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "torch": torch.__version__,
        "cuda": torch.cuda.is_available(),
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
    try:
        snapshot = snapshot_sources(work / "src", args.tips, args.from_commit)
        tips = tipmeta.read_all(snapshot / "gallery")
        names = [t.name for t in tips]
        edit = args.edit_tip if args.edit_tip in names else (
            "tip_inference_mode" if "tip_inference_mode" in names else names[0])
        print(f"bench: {len(tips)} tips; {args.runs} clean runs", flush=True)

        runs, records = [], []
        nochange = onetip = None
        incomplete = None
        try:
            root1, build, rec = clean_run(snapshot, work, 1)
            runs.append(build)
            records.append(rec)
            _say(build)
            nochange = no_change_rebuild(root1, work, rec)
            _say(nochange)
            onetip = one_tip_rebuild(root1, work, _tip_records(root1), edit)
            _say(onetip)
            for i in range(2, args.runs + 1):
                _, build, rec = clean_run(snapshot, work, i)
                runs.append(build)
                records.append(rec)
                _say(build)
        except (BenchError, KeyboardInterrupt) as exc:
            # Keep what was measured: a stopped benchmark still reports its finished builds.
            if not runs:
                raise
            incomplete = f"stopped after {len(runs)} clean run(s): {type(exc).__name__} {exc}".strip()
            print(f"bench: {incomplete}", flush=True)
        stability = ratio_stability(tips, records)
    finally:
        if args.keep:
            print(f"bench: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    walls = [r["wall_s"] for r in runs]
    data = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "finished": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _git("rev-parse", "--short", args.from_commit or "HEAD"),
        "uncommitted_sources": (False if args.from_commit else
                                bool(_git("status", "--porcelain", "--", "conf", "docs", "gallery"))),
        "subset": args.tips or None,
        "machine": machine(),
        "command": " ".join(["sphinx-build", *sphinx_command(Path("<copy>"))[-10:]]).replace(
            "<copy>/", ""),
        "tips": len(tips),
        "tips_by_kind": {k: sum(t.kind == k for t in tips) for k in sorted({t.kind for t in tips})},
        "clean_runs": runs,
        "no_change_rebuild": nochange,
        "one_tip_rebuild": onetip,
        "key_ratios": stability,
        "incomplete": incomplete,
    }
    data["targets"] = targets(data)
    data["summary"] = {
        "clean_build_s": {"median": round(statistics.median(walls), 1), "min": min(walls), "max": max(walls)},
        "tips_s_median": round(statistics.median(r["tips_s"] for r in runs), 1),
        "overhead_s_median": round(statistics.median(r["overhead_s"] for r in runs), 1),
    }
    return data


def targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of issue 7 with the measured figure and whether it was met."""
    runs, nc, ot = data["clean_runs"], data.get("no_change_rebuild"), data.get("one_tip_rebuild")
    worst = max(r["wall_s"] for r in runs)
    timed = [r for r in data["key_ratios"] if r.get("values")]
    moved = [r["tip"] for r in timed if not r["within_target"]]
    # The alternative: a tip whose figure moves more reports that spread itself.
    uncovered = [r["tip"] for r in timed if not r["within_target"] and r["runs_inside_reported_band"] is not True]
    changed = [r["tip"] for r in data["key_ratios"] if r["verdict_changed"]]
    rows = [
        {"what": "clean build, every tip executed", "target": f"<= {TARGET_CLEAN_S:.0f} s",
         "measured": f"{worst:.1f} s (slowest of {len(runs)} runs)", "met": worst <= TARGET_CLEAN_S}]
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
    if len(runs) > 1:
        rows += [
            {"what": "verdict changes across runs", "target": "0",
             "measured": f"{len(changed)}" + (f" ({', '.join(changed)})" if changed else ""),
             "met": not changed},
            {"what": "key figure of each speed/memory tip across runs",
             "target": f"within ±{TARGET_RATIO_PCT:.0f}% of the median, or inside the spread the tip reports",
             "measured": f"{len(timed) - len(moved)} of {len(timed)} within ±{TARGET_RATIO_PCT:.0f}%"
                         + (f"; moved more: {', '.join(moved)}" if moved else "")
                         + (f"; outside their own reported spread: {', '.join(uncovered)}" if uncovered
                            else "; every run inside the spread its tip reports" if moved else ""),
             "met": not uncovered},
        ]
    return rows


def _say(build: dict[str, Any]) -> None:
    extra = f", tips {build['tips_s']:.1f} s" if "tips_s" in build else ""
    print(f"bench: {build['label']}: {build['wall_s']:.1f} s{extra}, executed {build['executed']}"
          f"/{build['selected']} (cached {build['cached']}), load {build['load_before'][0]:.2f}"
          f" -> {build['load_after'][0]:.2f}, other processes {build['cores_used_by_others']:.2f}"
          " cores", flush=True)


# --- the page and the README summary ---------------------------------------------------------

def _esc(text: str) -> str:
    return (text.replace("\\", "\\\\").replace("*", "\\*").replace("`", "\\`").replace("|", "\\|")
            .replace("_", "\\_"))


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = [".. list-table::", "   :header-rows: 1", ""]
    for row in [header, *rows]:
        lines.append(f"   * - {row[0]}")
        lines += [f"     - {cell}" for cell in row[1:]]
    return lines + [""]


def _load_words(b: dict[str, Any]) -> str:
    return (f"{b['load_before'][0]:.2f} → {b['load_after'][0]:.2f}; others used"
            f" {b['cores_used_by_others']:.2f} of {b['cpu_count']} cores")


def render_page(data: dict[str, Any] | None) -> str:
    lines = [
        ".. _how-built:",
        "",
        "How this site is built",
        "======================",
        "",
        "Every figure on this site is measured by the build that publishes it. ``nox -s docs``",
        "runs Sphinx; sphinx-gallery executes each tip in ``gallery/`` once, in one process, one",
        ("tip after the other, with a reset hook between tips (seed, "
         f"{settings.TIPS_THREADS} intra-op threads, grad mode, default dtype and device). A tip's"),
        "``RESULT`` is saved next to its page, and the page shows the verdict, the figures and the",
        "provenance of that run. sphinx-gallery keeps an MD5 of every tip it ran: a rebuild",
        "re-executes only the tips whose file changed, and ``nox -s docs -- --clean`` re-runs them all.",
        "Timing tips run alone: nothing else in the build runs beside them. sphinx-gallery could",
        "run tips in parallel (its ``parallel`` option); the site does not use it, because on a",
        "2-core machine a tip running beside a timing tip would change that tip's figures.",
        "",
        "The benchmark",
        "-------------",
        "",
        "``nox -s bench`` (``python -m tipsite.bench``) builds a temporary copy of the sources with the",
        "same ``sphinx-build`` command as ``nox -s docs``, three times from clean. It times the",
        "whole build, a rebuild with nothing changed and a rebuild after a comment line is appended",
        "to one tip, and compares the key figure and verdict of every speed and memory tip across",
        "the three runs. Around each build it records the load average and how many cores other",
        "processes used, because a shared machine makes every timing noisier.",
        "",
    ]
    if data is None:
        lines += ["The benchmark has not been run for this version of the site yet.", ""]
        return "\n".join(lines)
    m = data["machine"]
    lines += [
        f"Last run: {data['date']}, commit ``{data['commit'] or 'unknown'}``"
        + (" (with uncommitted changes)" if data["uncommitted_sources"] else "")
        + f", {data['tips']} tips, on {_esc(m['cpu'])} ({m['cores']} cores,"
        f" {m['memory_gib']} GiB), {'CUDA' if m['cuda'] else 'no GPU'}, torch {m['torch']},"
        f" Python {m['python']}.",
        "",
    ]
    if data.get("subset"):
        lines += [f"This run built only the tips matching {_esc(', '.join(data['subset']))}.", ""]
    if data.get("incomplete"):
        lines += [f"**This run is incomplete**: {_esc(data['incomplete'])}.", ""]
    lines += ["Targets", "~~~~~~~", ""]
    lines += _table(["measure", "target", "measured", "met"],
                    [[_esc(t["what"]), _esc(t["target"]), _esc(t["measured"]), "yes" if t["met"] else "**no**"]
                     for t in data["targets"]])
    lines += ["Builds", "~~~~~~", "",
              "*tips* is the sum of the tips' own run times as sphinx-gallery recorded them;",
              "*overhead* is the rest: starting Python, Sphinx, reading and writing every page.",
              "*Load* is the 1-minute load average before and after the build.", ""]
    rows = [[f"clean run {i}", f"{b['wall_s']:.1f} s", f"{b['tips_s']:.1f} s",
             f"{b['overhead_s']:.1f} s", f"{b['executed']} of {b['selected']}", _load_words(b)]
            for i, b in enumerate(data["clean_runs"], 1)]
    nc, ot = data.get("no_change_rebuild"), data.get("one_tip_rebuild")
    if nc:
        rows.append(["rebuild, nothing changed", f"{nc['wall_s']:.1f} s", "0 s", f"{nc['wall_s']:.1f} s",
                     f"{nc['executed']} ({nc['cached']} cached)", _load_words(nc)])
    if ot:
        rows.append([f"rebuild, ``{ot['edited_tip']}`` edited", f"{ot['wall_s']:.1f} s", f"{ot['tip_s']:.1f} s",
                     f"{ot['overhead_s']:.1f} s", f"{ot['executed']} ({ot['cached']} cached)",
                     _load_words(ot)])
    lines += _table(["build", "wall", "tips", "overhead", "tips executed", "load"], rows)
    if nc:
        lines += [f"No-change rebuild: {_esc(nc['proof'])}.", ""]
    if ot:
        lines += [f"One-tip rebuild: {_esc(ot['proof'])}.", ""]
    lines += ["Run-to-run stability of the key figures", "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~", "",
              "For every speed and memory tip: its key figure in each clean run, the largest",
              f"deviation from the median of the runs (target ±{TARGET_RATIO_PCT:.0f}%), whether the",
              "runs stayed inside the spread the tip itself reports (the band on its page), and the",
              "verdicts. A tip whose figure moves more than the target should report the wider",
              "spread and keep its verdict band wide enough for it.", ""]
    rows = []
    for r in data["key_ratios"]:
        verdicts = ", ".join(v or "–" for v in r["verdicts"])
        if r["verdict_changed"]:
            verdicts = f"**{verdicts}**"
        if not r.get("values"):
            rows.append([f"``{r['tip']}``", r["kind"], "no key figure", "–", "–", "–", verdicts])
            continue
        inside = {True: "yes", False: "no", None: "–"}[r["runs_inside_reported_band"]]
        dev = ("around 0" if r["max_dev_pct"] is None else f"{r['max_dev_pct']:.1f}%") + (
            "" if r["within_target"] else " **(moved)**")
        rows.append([f"``{r['tip']}``", r["kind"], _esc(f"{r['key']} ({r['unit']})"),
                     ", ".join(f"{v:.4g}" for v in r["values"]), dev, inside, verdicts])
    if rows:
        lines += _table(["tip", "kind", "key figure", "runs", "max deviation", "inside own band",
                         "verdicts"], rows)
    else:
        lines += ["No speed or memory tips were built.", ""]
    moved = [r["tip"] for r in data["key_ratios"] if r.get("values") and not r["within_target"]]
    if moved:
        lines += ["Tips whose key figure moved more than "
                  f"±{TARGET_RATIO_PCT:.0f}%: " + ", ".join(f"``{t}``" for t in moved) + ".", ""]
    return "\n".join(lines)


def render_markdown(data: dict[str, Any]) -> str:
    """A summary for the README, from the same data."""
    m = data["machine"]
    s = data["summary"]
    nc, ot = data.get("no_change_rebuild"), data.get("one_tip_rebuild")
    out = [
        (f"Measured by `nox -s bench` on {data['date']}: {data['tips']} tips, {m['cpu']},"
         f" {m['cores']} cores, torch {m['torch']}; load average before the first build"
         f" {data['clean_runs'][0]['load_before'][0]:.2f}."),
        "",
        "| measure | target | measured | met |",
        "| --- | --- | --- | --- |",
    ]
    out += [f"| {t['what']} | {t['target']} | {t['measured']} | {'yes' if t['met'] else 'no'} |"
            for t in data["targets"]]
    out += [
        "",
        (f"Clean build: median {s['clean_build_s']['median']} s over {len(data['clean_runs'])} runs"
         f" ({s['clean_build_s']['min']}–{s['clean_build_s']['max']} s), of which the tips' own run"
         f" time {s['tips_s_median']} s and overhead {s['overhead_s_median']} s."
         + (f" No-change rebuild {nc['wall_s']} s." if nc else "")
         + (f" Rebuild after editing `{ot['edited_tip']}` {ot['wall_s']} s (the tip itself"
            f" {ot['tip_s']} s)." if ot else "")),
    ]
    if data.get("incomplete"):
        out += ["", f"**Incomplete run**: {data['incomplete']}."]
    moved = [r for r in data["key_ratios"] if r.get("values") and not r["within_target"]]
    flipped = [r for r in data["key_ratios"] if r["verdict_changed"]]
    if moved:
        out += ["", f"Key figures that moved more than ±{TARGET_RATIO_PCT:.0f}% across the runs (the tip"
                " should report that spread and keep its verdict band wide enough for it):", ""]
        out += [f"- `{r['tip']}`: {r['key']} = {', '.join(f'{v:.4g}' for v in r['values'])}"
                f" ({'around 0' if r['max_dev_pct'] is None else str(r['max_dev_pct']) + '%'} from the median)"
                for r in moved]
    if flipped:
        out += ["", "Verdicts that changed between runs:", ""]
        out += [f"- `{r['tip']}`: {' / '.join(str(v) for v in r['verdicts'])}" for r in flipped]
    return "\n".join(out)


def write_outputs(data: dict[str, Any], out: Path, page: Path | None) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"bench: figures written to {out}")
    if page is not None:
        page.write_text(render_page(data), encoding="utf-8")
        print(f"bench: page written to {page}")


def _stop(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _stop)
    parser = argparse.ArgumentParser(prog="python -m tipsite.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="clean builds (default 3)")
    parser.add_argument("--tips", nargs="+", metavar="PATTERN",
                        help="build only tips whose name matches (fnmatch); for trying it out")
    parser.add_argument("--from-commit", metavar="REV",
                        help="build the sources of this commit (git archive), not the working tree")
    parser.add_argument("--edit-tip", default="tip_inference_mode",
                        help="tip to edit for the one-tip rebuild (default: the exemplar)")
    parser.add_argument("--out", type=Path, default=DATA_FILE, help=f"data file (default {DATA_FILE})")
    parser.add_argument("--page", type=Path, default=PAGE_FILE, help="page rendered from the data")
    parser.add_argument("--no-page", action="store_true", help="do not render the page")
    parser.add_argument("--render", action="store_true",
                        help="only render the page and print the README summary from --out")
    parser.add_argument("--keep", action="store_true", help="keep the temporary build trees")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    page = None if args.no_page else args.page
    if args.render:
        data = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else None
        if data:
            data["targets"] = targets(data)  # the rules may have changed since the run
            args.out.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        if page is not None:
            page.write_text(render_page(data), encoding="utf-8")
        if data:
            print(render_markdown(data))
        return 0
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    data = run_bench(args)
    write_outputs(data, args.out, page)
    print(render_markdown(data))
    missed = [t["what"] for t in data["targets"] if not t["met"]]
    if missed:
        print("bench: targets missed: " + "; ".join(missed))
    return 1 if missed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())

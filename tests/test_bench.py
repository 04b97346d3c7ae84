"""The build benchmark's bookkeeping (tipsite/bench.py) and its page, without building the site.

The benchmark itself is ``nox -s bench``: it builds the site several times, far too slow for a
test. These tests feed it synthetic records in the current format (a decision per device) and
check what it concludes: which tips re-executed, per-device verdict stability (every kind of
tip), key figures against the intervals the tips report, what the tips' run time costs, its
targets, the ``--load`` processes, and that the ``tips-bench`` directive renders the page.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import build_env

from conf import settings
from tipsite import bench, tipmeta
from tipsite.sphinxext import benchpage


def _decision(device, verdict="holds", value=2.0, low=None, high=None, rounds=8, comparisons=2,
              name="speed-up at size 64", unit="x"):
    key = None if value is None else {"name": name, "value": value, "low": low, "high": high,
                                      "unit": unit, "rounds": rounds}
    return {"device": device, "verdict": verdict, "key": key,
            "comparisons": [{"name": f"c{i}", "ratios": [1.0] * rounds} for i in range(comparisons)]}


def _output(*decisions, time_s=2.0, mtime=1):
    """What one clean build left for one tip (bench.tip_outputs' shape)."""
    return {"time_s": time_s, "memory_mib": 10.0, "cost_mtime": mtime, "result_mtime": mtime,
            "result": {"verdicts": {d["device"]: d for d in decisions}}}


def _tip(name, kind="speed", topic="speed", devices=("cpu",)):
    return tipmeta.Tip(path=settings.GALLERY_DIR / topic / f"{name}.py", title=name, claims=(),
                       tags=("autograd",), devices=tuple(devices), kind=kind, min_torch="2.0", takeaway="t")


SUMMARY = """
Sphinx-Gallery successfully executed 1 out of 1 file subselected by:

    gallery_conf["filename_pattern"] = '/tip_'
    gallery_conf["ignore_pattern"]   = '__init__\\\\.py'

after excluding 7 files that had previously been run (based on MD5).
"""


def test_reads_sphinx_gallery_summary():
    m = bench._EXECUTED_RE.search(SUMMARY)
    assert m is not None and m.groups() == ("1", "1", "7")


def test_changed_tips_are_those_whose_records_were_rewritten():
    before = {"tip_a": _output(_decision("cpu"), mtime=1), "tip_b": _output(_decision("cpu"), mtime=1)}
    after = {"tip_a": _output(_decision("cpu"), mtime=1), "tip_b": _output(_decision("cpu"), mtime=2)}
    assert bench.changed_tips(before, after) == ["tip_b"]
    assert bench.changed_tips(before, before) == []


TIPS = [_tip("tip_steady", devices=("cpu", "cuda")), _tip("tip_jumpy", "memory"),
        _tip("tip_flip"), _tip("tip_behaviour", "behaviour", "correctness"),
        _tip("tip_gone", "behaviour", "correctness"), _tip("tip_cuda_only", devices=("cuda",))]


def _runs():
    """Three clean builds: steady on both devices, a memory figure that moves, a speed verdict and
    a behaviour verdict that flip, a device decided once only, a CUDA-only tip on a CPU machine."""
    return [
        {"tip_steady": _output(_decision("cpu", value=v, low=1.9, high=2.1),
                               _decision("cuda", value=w, low=w - 0.5, high=w + 0.5), time_s=9.0),
         "tip_jumpy": _output(_decision("cpu", "depends", value=j, unit="MiB", name="peak"), time_s=1.0),
         "tip_flip": _output(_decision("cpu", f, value=1.05, low=1.0, high=1.1), time_s=4.0),
         "tip_behaviour": _output(_decision("cpu", b, value=None, comparisons=0), time_s=0.5),
         "tip_gone": _output(*([_decision("cpu", "wrong", value=None, comparisons=0)] if g else []), time_s=0.5),
         "tip_cuda_only": _output(time_s=0.1)}
        for v, w, j, f, b, g in [(2.00, 10.0, 1.0, "holds", "holds", True),
                                 (2.04, 10.2, 1.2, "depends", "holds", True),
                                 (1.98, 9.9, 1.1, "holds", "wrong", False)]]


def test_stability_is_per_device_for_every_tip():
    rows = {(r["tip"], r["device"]): r for r in bench.stability(TIPS, _runs())}
    assert set(rows) == {("tip_steady", "cpu"), ("tip_steady", "cuda"), ("tip_jumpy", "cpu"),
                         ("tip_flip", "cpu"), ("tip_behaviour", "cpu"), ("tip_gone", "cpu"),
                         ("tip_cuda_only", None)}
    steady = rows["tip_steady", "cpu"]
    assert steady["within_target"] and not steady["verdict_changed"]
    assert steady["median"] == 2.0 and steady["max_dev_pct"] == pytest.approx(2.0)
    assert steady["inside_intervals"] is True and steady["intervals_missed"] == 0
    assert steady["rounds"] == [8, 8, 8] and steady["intervals"] == [[1.9, 2.1]] * 3
    assert rows["tip_steady", "cuda"]["inside_intervals"] is True
    jumpy = rows["tip_jumpy", "cpu"]
    assert not jumpy["within_target"] and jumpy["max_dev_pct"] == pytest.approx(9.1, abs=0.1)
    assert jumpy["inside_intervals"] is None  # the tip reported no interval
    # a speed verdict and a behaviour verdict that flip are both flagged
    assert rows["tip_flip", "cpu"]["verdict_changed"] and rows["tip_flip", "cpu"]["within_target"]
    assert rows["tip_behaviour", "cpu"]["verdict_changed"]
    assert rows["tip_behaviour", "cpu"]["verdicts"] == ["holds", "holds", "wrong"]
    assert rows["tip_behaviour", "cpu"]["values"] == []  # no key figure: only the verdict compared
    # decided in two builds, not in the third: a change
    assert rows["tip_gone", "cpu"]["verdicts"] == ["wrong", "wrong", None]
    assert rows["tip_gone", "cpu"]["verdict_changed"]
    only = rows["tip_cuda_only", None]
    assert not only["verdict_changed"] and "cuda" in only["note"]


def test_a_figure_outside_another_builds_interval_is_named():
    tips = [_tip("tip_narrow")]
    runs = [{"tip_narrow": _output(_decision("cpu", value=v, low=v - 0.01, high=v + 0.01))}
            for v in (1.50, 1.52, 1.60)]
    (row,) = bench.stability(tips, runs)
    assert row["inside_intervals"] is False and row["intervals_missed"] == 6
    assert not row["within_target"]


def test_a_figure_that_is_zero_in_every_run_is_stable():
    tips = [_tip("tip_zero", "memory"), _tip("tip_around_zero", "memory")]
    runs = [{"tip_zero": _output(_decision("cpu", value=0.0)),
             "tip_around_zero": _output(_decision("cpu", value=v))} for v in (0.0, 0.1, -0.1)]
    rows = {r["tip"]: r for r in bench.stability(tips, runs)}
    assert rows["tip_zero"]["max_dev_pct"] == 0.0 and rows["tip_zero"]["within_target"]
    assert rows["tip_around_zero"]["max_dev_pct"] is None and not rows["tip_around_zero"]["within_target"]


def _build(wall, tips_s, **extra):
    return {"wall_s": wall, "tips_s": tips_s, "overhead_s": round(wall - tips_s, 2), "executed": 6,
            "selected": 6, "cached": 0, "load_before": [1.0, 1.0, 1.0], "load_after": [1.5, 1.0, 1.0],
            "load_processes": 1, "cores_used_by_build": 0.9, "cores_used_by_load": 0.98,
            "cores_used_by_others": 0.1, "cpu_count": 2, **extra}


def _data(runs=None, load=1, machine_cpu="Some_CPU*"):
    runs = _runs() if runs is None else runs
    builds = [_build(100.0 + i, sum(o["time_s"] for o in r.values()), label=f"clean{i}",
                     tip_times_s={n: o["time_s"] for n, o in r.items()})
              for i, r in enumerate(runs, 1)]
    data = {
        "schema": bench.SCHEMA, "date": "2026-11-22 06:40 UTC", "commit": "abc1234",
        "uncommitted_sources": False, "execution_fingerprint": "f" * 64, "subset": None, "tips": len(TIPS),
        "machine": {"cpu": machine_cpu, "cpu_flags": ["avx2"], "cores": 2, "memory_gib": 24.0,
                    "torch": "2.13.0+cpu", "cuda": False, "python": "3.11.7", "tips_threads": 2},
        "command": "sphinx-build -b html -W --keep-going -j 1 -d build/doctrees docs build/html",
        "load": {"cores": load, "process": "busy loop" if load else None},
        "clean_runs": builds,
        "no_change_rebuild": _build(6.0, 0.0, label="nochange", executed=0, selected=0, cached=6,
                                    nothing_executed=True, proof="executed 0 out of 0 files"),
        "one_tip_rebuild": _build(20.0, 2.0, label="onetip", executed=1, selected=1, cached=5,
                                  edited_tip="tip_steady", tip_s=2.0, only_that_tip=True,
                                  proof="only tip_steady's records were rewritten"),
        "tip_costs": bench.tip_costs(TIPS, builds, runs),
        "stability": bench.stability(TIPS, runs),
        "incomplete": None,
    }
    data["targets"] = bench.targets(data)
    data["summary"] = bench.summarize(data)
    return data


def _targets(data):
    return {t["what"]: t for t in data["targets"]}


def test_targets_report_each_miss_with_its_figure():
    met = _targets(_data())
    assert met["clean build, every tip executed"]["met"]
    assert met["rebuild, nothing changed"]["met"]
    assert not met["rebuild after editing tip_steady"]["met"]  # 20 s > 2 s + 15 s
    assert "20.0 s" in met["rebuild after editing tip_steady"]["measured"]
    flips = met["verdict changes across clean builds, every tip and device"]
    assert not flips["met"]
    assert flips["measured"].startswith("3 of 6 tip/device verdicts changed across 3 builds (1 core kept busy)")
    for name in ("tip_flip (CPU)", "tip_behaviour (CPU)", "tip_gone (CPU)"):
        assert name in flips["measured"]
    key = met["key figure of each tip and device across clean builds"]
    assert not key["met"] and "tip_jumpy (CPU)" in key["measured"]  # moved, and reported no interval


def _steady_runs():
    return [{n: o for n, o in r.items() if n in ("tip_steady", "tip_cuda_only")} for r in _runs()]


def test_stability_target_needs_three_builds_under_load():
    met = _targets(_data(_steady_runs()))["verdict changes across clean builds, every tip and device"]
    assert met["met"] and met["measured"] == "0 of 2 tip/device verdicts changed across 3 builds (1 core kept busy)"
    unloaded = _targets(_data(_steady_runs(), load=0))["verdict changes across clean builds, every tip and device"]
    assert not unloaded["met"] and "without --load 1" in unloaded["measured"]
    starved = _data(_steady_runs())
    starved["clean_runs"][1].update(cores_used_by_load=0.3, cores_used_by_others=0.1)
    starved = {t["what"]: t for t in bench.targets(starved)}["verdict changes across clean builds, every tip and device"]
    assert not starved["met"] and "only 0.40 cores were busy beside the build" in starved["measured"]
    one = _targets(_data(_steady_runs()[:1]))
    assert not one["verdict changes across clean builds, every tip and device"]["met"]
    assert "1 clean build, not 3" in one["verdict changes across clean builds, every tip and device"]["measured"]
    assert not one["key figure of each tip and device across clean builds"]["met"]


def test_tip_costs_slowest_first_with_their_sweeps():
    data = _data()
    costs = data["tip_costs"]
    assert [r["tip"] for r in costs][:3] == ["tip_steady", "tip_flip", "tip_jumpy"]
    steady = costs[0]
    assert steady["median_s"] == 9.0 and steady["times_s"] == [9.0, 9.0, 9.0]
    assert steady["comparisons"] == 4 and steady["rounds"] == 32  # two devices, 2 comparisons x 8 rounds
    assert steady["share_pct"] == pytest.approx(9.0 / 15.1 * 100, abs=0.1)
    assert data["summary"]["tips_s_median"] == 15.1


# --- the load option ---------------------------------------------------------------------------

def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_load_starts_its_processes_and_stops_them():
    with bench.CpuLoad(2) as load:
        pids = [p.pid for p in load.procs]
        assert len(pids) == 2 and all(_alive(pid) for pid in pids) and load.running() == 2
    assert all(p.returncode is not None for p in load.procs)
    assert not any(_alive(pid) for pid in pids)
    with bench.CpuLoad(0) as none:
        assert none.procs == [] and none.cpu_s() == 0.0


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_load_dies_with_a_killed_benchmark():
    """A benchmark killed outright (no __exit__, no atexit) leaves no busy process behind."""
    code = ("import os, sys, time\nfrom tipsite import bench\nload = bench.CpuLoad(1).__enter__()\n"
            "print(load.procs[0].pid, flush=True)\ntime.sleep(0.5)\nos._exit(9)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=build_env())
    pid = int(proc.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid), f"busy process {pid} outlived its killed parent"


@pytest.fixture
def loads(monkeypatch) -> list[bench.CpuLoad]:
    """Every CpuLoad the benchmark starts, to check afterwards."""
    started = []

    class Watched(bench.CpuLoad):
        def __enter__(self):
            started.append(self)
            return super().__enter__()

    monkeypatch.setattr(bench, "CpuLoad", Watched)
    return started


def test_a_build_under_load_records_it_and_stops_the_load(tmp_path, loads):
    # Stands in for sphinx-build: busy for a moment, then sphinx-gallery's summary line.
    fake = [sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 0.5: pass\n"
            f"print({SUMMARY!r})"]
    run = bench.run_build(tmp_path, "fake", tmp_path, load=1, command=fake)
    (load,) = loads
    assert run["load_processes"] == 1 and run["executed"] == 1 and run["cached"] == 7
    assert run["cores_used_by_load"] > 0  # it ran during the build, however busy the machine
    assert all(p.returncode is not None for p in load.procs) and not _alive(load.procs[0].pid)
    assert (tmp_path / "fake.log").exists()
    unloaded = bench.run_build(tmp_path, "fake0", tmp_path, load=0, command=fake)
    assert unloaded["load_processes"] == 0 and unloaded["cores_used_by_load"] == 0


def test_a_failed_build_still_stops_the_load(tmp_path, loads):
    with pytest.raises(bench.BenchError, match="the build failed"):
        bench.run_build(tmp_path, "bad", tmp_path, load=1, command=[sys.executable, "-c", "raise SystemExit(3)"])
    (load,) = loads
    assert all(p.returncode is not None for p in load.procs)


# --- sources ---------------------------------------------------------------------------------

def test_snapshot_copies_sources_and_the_build_programs_without_outputs(tmp_path):
    dest = bench.snapshot_sources(tmp_path / "src", ["tip_inference_mode"])
    assert (dest / "docs" / "conf.py").exists() and (dest / "conf" / "settings.py").exists()
    assert (dest / "tipsite" / "gallery.py").exists() and (dest / "tipsite" / "sphinxext" / "templates").is_dir()
    for rel in bench.build.OUTPUTS:
        assert not (dest / rel).exists(), rel
    assert not list(dest.rglob("__pycache__"))
    assert [p.name for p in tipmeta.tip_files(dest / "gallery")] == ["tip_inference_mode.py"]
    # the copy's execution layer is the checkout's
    assert bench.build.execution_fingerprint(dest) == bench.build.execution_fingerprint()
    with pytest.raises(bench.BenchError):
        bench.snapshot_sources(tmp_path / "none", ["tip_no_such_tip"])


def test_snapshot_from_a_commit_takes_only_committed_files(tmp_path):
    dest = bench.snapshot_sources(tmp_path / "src", ["tip_inference_mode"], commit="HEAD")
    assert (dest / "docs" / "conf.py").exists() and (dest / "tipsite" / "build.py").exists()
    assert [p.name for p in tipmeta.tip_files(dest / "gallery")] == ["tip_inference_mode.py"]


# --- the page and the README summary ----------------------------------------------------------

PAGE = """\
Bench
=====

.. tips-bench:: summary

.. tips-bench:: targets

.. tips-bench:: builds

.. tips-bench:: tip-times

.. tips-bench:: stability
"""

CONF = """\
from tipsite.sphinxext import _inline_role, benchpage, cards

project = "bench page"
exclude_patterns = ["_build"]


def setup(app):
    app.add_directive("tips-bench", benchpage.BenchPage)
    app.add_directive("tips-states", cards.TipsStates)
    app.add_role("tip-verdict", _inline_role("tip-verdict", per_value=True))
    app.add_role("tip-state", cards.state_role)
"""


def _sphinx(tmp_path: Path, data, pages: dict[str, str]) -> str:
    """Build a tiny Sphinx project with the directive, warnings as errors; the index's HTML."""
    from sphinx.cmd.build import build_main

    src = tmp_path / "src"
    (src / "_data").mkdir(parents=True)
    (src / "conf.py").write_text(CONF, encoding="utf-8")
    if data is not None:
        (src / "_data" / "bench.json").write_text(json.dumps(data), encoding="utf-8")
    for name, text in pages.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text, encoding="utf-8")
    out = tmp_path / "html"
    warnings = tmp_path / "warnings.txt"
    code = build_main(["-b", "html", "-W", "-q", "-w", str(warnings), "-d", str(tmp_path / "doctrees"),
                       str(src), str(out)])
    assert code == 0, warnings.read_text(encoding="utf-8")
    return (out / "index.html").read_text(encoding="utf-8")


def test_directive_renders_every_part_as_valid_html(tmp_path):
    data = _data(machine_cpu="Evil `CPU`_ <script>alert(1)</script> :raw:`x` *")
    data["incomplete"] = "stopped after 3 clean run(s): KeyboardInterrupt"
    html = _sphinx(tmp_path, data, {
        "index.rst": PAGE + "\n.. toctree::\n\n   tips/speed/tip_steady\n",
        "tips/speed/tip_steady.rst": "Steady\n======\n"})
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "Evil `CPU`_" in html  # hostile text stays text
    assert 'href="tips/speed/tip_steady.html"' in html  # a tip this build has is linked
    assert "tip_flip" in html and "<strong>changed</strong>" in html and "<strong>moved</strong>" in html
    assert 'class="tip-verdict tip-verdict-holds"' in html
    assert "1 core kept busy by a CPU-bound process" in html
    assert "This run is incomplete" in html
    assert "<strong>no</strong>" in html and "tips-bench-tip-times" in html
    assert "15.1 s" in html  # the tips' own run time
    assert "1.9–2.1x" in html  # the interval the tip reported
    assert "2x, 2.04x, 1.98x" in html  # the key figure of each build


@pytest.mark.parametrize("kind", ["missing", "old"])
def test_directive_never_shows_old_or_missing_data_as_current(tmp_path, kind):
    old = json.loads((settings.DOCS_DIR / "_data" / "bench.json").read_text(encoding="utf-8"))
    if kind == "old":
        old = {k: v for k, v in old.items() if k != "schema"} if old.get("schema") == bench.SCHEMA else old
        old.setdefault("date", "2026-11-22 06:39 UTC")
    html = _sphinx(tmp_path, old if kind == "old" else None, {"index.rst": PAGE})
    if kind == "old":
        assert "Not measured for the current tips yet" in html and old["date"] in html
    else:
        assert "has not been run for this version of the site yet" in html
    assert "<table" not in html


def test_the_real_page_renders_with_sample_data(tmp_path):
    page = (settings.DOCS_DIR / "how_built.rst").read_text(encoding="utf-8")
    # the pages it links to, as stubs
    stub = ":orphan:\n\nExecution times\n===============\n"
    contribute = ":orphan:\n\n.. _tips-contribute:\n\nContribute\n==========\n"
    html = _sphinx(tmp_path, _data(), {"index.rst": page, "sg_execution_times.rst": stub,
                                      "contribute.rst": contribute})
    assert html.count("tips-bench-") >= 5 and "What the sweeps cost" in html


def test_unknown_part_is_an_error(tmp_path):
    with pytest.raises(AssertionError, match="unknown part"):
        _sphinx(tmp_path, _data(), {"index.rst": "T\n=\n\n.. tips-bench:: everything\n"})


def test_readme_summary_says_what_the_tips_cost():
    text = benchpage.readme_text(_data())
    line = text.splitlines()[1]
    assert text.startswith("<!-- build-time -->")
    assert line.startswith("Clean build time on the 2-core development machine: 102 s (median of 3 clean builds")
    assert "1 core kept busy" in line and "the tips' own run time 15 s of it, slowest tip_steady 9.0 s, tip_flip 4.0 s, tip_jumpy 1.0 s;" in line
    assert "| `tip_steady` | speed | 9.0 s | 59.6% | 4 | 32 |" in text
    assert "| 1 more |" in text  # six tips: five named, the rest summed
    assert "- `tip_behaviour` on CPU: holds / holds / wrong" in text
    assert "- `tip_jumpy` on CPU: peak (MiB) = 1 MiB, 1.2 MiB, 1.1 MiB (9.1% from the median" in text
    assert "| verdict changes across clean builds, every tip and device | 0 across 3 clean builds" in text


def test_render_prints_the_summary_or_refuses_old_data(tmp_path, capsys):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"date": "2026-11-22 06:39 UTC", "key_ratios": []}), encoding="utf-8")
    assert benchpage.main([str(path)]) == 1
    assert "tips-bench/2" in capsys.readouterr().err
    path.write_text(json.dumps(_data()), encoding="utf-8")
    assert benchpage.main([str(path)]) == 0
    assert "Clean build time on the 2-core" in capsys.readouterr().out
    assert json.loads(path.read_text(encoding="utf-8")) == _data()  # rendering writes nothing


def test_a_stopped_run_still_reports_what_it_measured(tmp_path):
    data = _data(_runs()[:1])
    data.update(no_change_rebuild=None, one_tip_rebuild=None,
                incomplete="stopped after 1 clean run(s): KeyboardInterrupt signal 15")
    data["targets"] = bench.targets(data)
    assert [t["what"] for t in data["targets"]][0] == "clean build, every tip executed"
    assert "Incomplete run" in benchpage.readme_text(data)
    html = _sphinx(tmp_path, data, {"index.rst": PAGE})
    assert "This run is incomplete" in html


def test_no_process_left_behind():
    """Belt and braces: no busy loop of this test session survives it."""
    mine = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if fields[1] == mine and fields[0] != "Z":
            assert bench.BUSY_LOOP.encode() not in cmdline


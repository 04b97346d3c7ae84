"""The build benchmark's bookkeeping (conf/bench.py), without building anything.

The benchmark itself is ``nox -s bench``: it builds the site several times, far too slow for a
test. These tests check what it concludes from a build: which tips re-executed, how it judges
the stability of a key figure, its targets, and that the page it renders is valid reST.
"""

from __future__ import annotations

import docutils.core
import pytest

from conf import settings
from tipsite import bench, tipmeta


def _record(value, verdict="holds", low=None, high=None, mtime=1):
    key = {"name": "speed-up", "value": value, "unit": "x", "low": low, "high": high}
    return {"time_s": 2.0, "memory_mib": 10.0, "cost_mtime": mtime, "result_mtime": mtime,
            "result": {"verdict": verdict, "key": key}}


def _tip(name, kind, topic="speed"):
    return tipmeta.Tip(path=settings.GALLERY_DIR / topic / f"{name}.py", title=name, claims=(),
                       tags=("autograd",), devices=("cpu",), kind=kind, min_torch="2.0", takeaway="t")


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
    before = {"tip_a": _record(1.0, mtime=1), "tip_b": _record(1.0, mtime=1)}
    after = {"tip_a": _record(1.0, mtime=1), "tip_b": _record(1.0, mtime=2)}
    assert bench.changed_tips(before, after) == ["tip_b"]
    assert bench.changed_tips(before, before) == []


def test_ratio_stability_flags_moves_and_verdict_changes():
    tips = [_tip("tip_steady", "speed"), _tip("tip_jumpy", "memory"), _tip("tip_flip", "speed"),
            _tip("tip_behaviour", "behaviour", "correctness")]
    runs = [
        {"tip_steady": _record(2.00, low=1.9, high=2.1), "tip_jumpy": _record(1.0),
         "tip_flip": _record(1.06, "holds"), "tip_behaviour": _record(1.0)},
        {"tip_steady": _record(2.04, low=1.9, high=2.1), "tip_jumpy": _record(1.2),
         "tip_flip": _record(1.04, "depends"), "tip_behaviour": _record(1.0)},
        {"tip_steady": _record(1.98, low=1.9, high=2.1), "tip_jumpy": _record(1.1),
         "tip_flip": _record(1.05, "holds"), "tip_behaviour": _record(1.0)},
    ]
    rows = {r["tip"]: r for r in bench.ratio_stability(tips, runs)}
    assert set(rows) == {"tip_steady", "tip_jumpy", "tip_flip"}  # behaviour tips time nothing
    steady = rows["tip_steady"]
    assert steady["within_target"] and not steady["verdict_changed"]
    assert steady["median"] == 2.0 and steady["max_dev_pct"] == pytest.approx(2.0)
    assert steady["runs_inside_reported_band"] is True
    jumpy = rows["tip_jumpy"]
    assert not jumpy["within_target"] and jumpy["max_dev_pct"] == pytest.approx(9.1, abs=0.1)
    assert jumpy["runs_inside_reported_band"] is None  # the tip reported no band
    assert rows["tip_flip"]["verdict_changed"] and rows["tip_flip"]["within_target"]


def _data():
    tips = [_tip("tip_steady", "speed"), _tip("tip_jumpy", "memory")]
    runs = [{"tip_steady": _record(2.0), "tip_jumpy": _record(v)} for v in (1.0, 1.2, 1.1)]
    build = {"wall_s": 100.0, "tips_s": 80.0, "overhead_s": 20.0, "executed": 2, "selected": 2,
             "cached": 0, "load_before": [1.0, 1.0, 1.0], "load_after": [1.5, 1.0, 1.0],
             "cores_used_by_build": 1.9, "cores_used_by_others": 0.1, "cpu_count": 2}
    data = {
        "date": "2026-11-22 06:40 UTC", "commit": "abc1234", "uncommitted_sources": False,
        "subset": None, "tips": 2,
        "machine": {"cpu": "Some_CPU*", "cores": 2, "memory_gib": 24.0, "torch": "2.13.0+cpu",
                    "cuda": False, "python": "3.11.7", "tips_threads": 2},
        "clean_runs": [dict(build, label=f"clean{i}") for i in (1, 2, 3)],
        "no_change_rebuild": dict(build, wall_s=6.0, executed=0, selected=0, cached=2,
                                  nothing_executed=True, proof="executed 0 out of 0 files"),
        "one_tip_rebuild": dict(build, wall_s=20.0, executed=1, selected=1, cached=1,
                                edited_tip="tip_steady", tip_s=2.0, overhead_s=18.0,
                                only_that_tip=True, proof="only tip_steady's records were rewritten"),
        "key_ratios": bench.ratio_stability(tips, runs),
        "summary": {"clean_build_s": {"median": 100.0, "min": 100.0, "max": 100.0},
                    "tips_s_median": 80.0, "overhead_s_median": 20.0},
    }
    data["targets"] = bench.targets(data)
    return data


def test_targets_report_each_miss_with_its_figure():
    met = {t["what"]: t for t in _data()["targets"]}
    assert met["clean build, every tip executed"]["met"]
    assert met["rebuild, nothing changed"]["met"]
    assert not met["rebuild after editing tip_steady"]["met"]  # 20 s > 2 s + 15 s
    assert "20.0 s" in met["rebuild after editing tip_steady"]["measured"]
    assert met["verdict changes across runs"]["met"]
    ratio = met["key figure of each speed/memory tip across runs"]
    assert not ratio["met"] and "tip_jumpy" in ratio["measured"]  # no band reported: not covered


@pytest.mark.parametrize("data", [None, "data"])
def test_page_is_valid_rest(data):
    text = bench.render_page(_data() if data else None)
    # Sphinx-only constructs are not used; docutils alone must accept the page without warnings.
    docutils.core.publish_string(text, writer="null",
                                 settings_overrides={"halt_level": 2, "report_level": 2})
    assert text.startswith(".. _how-built:")
    if data:
        assert "``tip_jumpy``" in text and "**no**" in text


def test_snapshot_copies_sources_without_build_outputs(tmp_path):
    dest = bench.snapshot_sources(tmp_path / "src", ["tip_inference_mode"])
    assert (dest / "docs" / "conf.py").exists() and (dest / "conf" / "bench.py").exists()
    assert not (dest / "docs" / settings.TIPS_OUT_DIR.name).exists()
    assert not (dest / "docs" / "generated").exists()
    assert [p.name for p in tipmeta.tip_files(dest / "gallery")] == ["tip_inference_mode.py"]
    with pytest.raises(bench.BenchError):
        bench.snapshot_sources(tmp_path / "none", ["tip_no_such_tip"])


def test_snapshot_from_a_commit_takes_only_committed_files(tmp_path):
    dest = bench.snapshot_sources(tmp_path / "src", ["tip_inference_mode"], commit="HEAD")
    assert (dest / "docs" / "conf.py").exists() and (dest / "conf" / "settings.py").exists()
    assert [p.name for p in tipmeta.tip_files(dest / "gallery")] == ["tip_inference_mode.py"]


def test_a_stopped_run_still_reports_what_it_measured():
    data = _data()
    data.update(clean_runs=data["clean_runs"][:1], no_change_rebuild=None, one_tip_rebuild=None,
                incomplete="stopped after 1 clean run(s): KeyboardInterrupt signal 15")
    data["targets"] = bench.targets(data)
    assert [t["what"] for t in data["targets"]] == ["clean build, every tip executed"]
    text = bench.render_page(data)
    docutils.core.publish_string(text, writer="null",
                                 settings_overrides={"halt_level": 2, "report_level": 2})
    assert "incomplete" in text and "Incomplete run" in bench.render_markdown(data)


def test_a_figure_that_is_zero_in_every_run_is_stable():
    tips = [_tip("tip_zero", "memory"), _tip("tip_around_zero", "memory")]
    runs = [{"tip_zero": _record(0.0), "tip_around_zero": _record(v)} for v in (0.0, 0.1, -0.1)]
    rows = {r["tip"]: r for r in bench.ratio_stability(tips, runs)}
    assert rows["tip_zero"]["max_dev_pct"] == 0.0 and rows["tip_zero"]["within_target"]
    assert rows["tip_around_zero"]["max_dev_pct"] is None and not rows["tip_around_zero"]["within_target"]

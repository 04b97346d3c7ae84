"""tipsite/gpucheck.py: a CUDA set whose profiler could not see the GPU fails expect-device."""

from __future__ import annotations

import copy

from tipsite import gpucheck


def _point(name, kernels=(5, 7), busy=(0.9e-3, 0.8e-3)):
    c = {"name": name, "baseline": "slow", "candidate": "fast",
         "device_time": {"base": busy[0], "cand": busy[1]}, "window": {"base": 1e-3, "cand": 1e-3},
         "bound": "device"}
    if kernels is not None:
        c["kernels"] = {"base": kernels[0], "cand": kernels[1]}
    return c


def _record(points, verdict="holds"):
    return {"tip": "tip_x", "verdicts": {"cuda": {"verdict": verdict, "comparisons": points}}}


def test_a_set_that_saw_the_gpu_passes():
    assert gpucheck.blind_problems(_record([_point("a"), _point("b")]), "cuda") == []
    assert gpucheck.blind_problems(_record([_point("a", kernels=None)]), "cuda") == []  # older set
    assert gpucheck.blind_problems(_record([_point("a", kernels=(0, 0))]), "cpu") == []
    assert gpucheck.blind_problems({"tip": "t", "verdicts": {}}, "cuda") == []


def test_a_variant_without_gpu_activity_fails_naming_tip_and_comparison():
    problems = gpucheck.blind_problems(_record([_point("a"), _point("graphs", kernels=(9, 0))]), "cuda")
    assert problems == ["tip_x: comparison 'graphs' on cuda: the profiler recorded no GPU activity "
                        "for fast (a blind profiler: rerun)"]


def test_an_older_set_with_no_busy_time_is_blind_too():
    problems = gpucheck.blind_problems(_record([_point("a", kernels=None, busy=(0.0, 0.0))]), "cuda")
    assert len(problems) == 1 and "slow, fast" in problems[0]


def test_an_inconclusive_verdict_caused_by_missing_activity_fails():
    blind = _record([_point("a", kernels=(0, 0), busy=(0.0, 0.0))], verdict="inconclusive")
    problems = gpucheck.blind_problems(blind, "cuda")
    assert any("'inconclusive' because the profiler saw no GPU activity" in p for p in problems)
    host_bound = copy.deepcopy(_record([_point("a", busy=(0.1e-3, 0.2e-3))], verdict="inconclusive"))
    assert gpucheck.blind_problems(host_bound, "cuda") == []  # the host bound it: a real result

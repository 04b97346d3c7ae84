"""The helpers every tip copies (tipsite/tipkit.py): the copies match, the interval covers, and
the build's re-derivation catches any verdict the evidence does not give."""

from __future__ import annotations

import ast
import copy
import random
import statistics

import pytest

from tipsite import tipcheck, tipkit, tipmeta

TIPS = tipmeta.tip_files()


@pytest.mark.parametrize("path", TIPS, ids=lambda p: p.stem)
def test_every_copied_helper_matches_the_reference(path):
    """A tip copies each helper verbatim (downloads stay standalone); a changed copy fails here.
    ``python -m tipsite.tipcheck --sync TIP`` rewrites the copies from the reference."""
    assert tipcheck.helper_problems(path) == []


@pytest.mark.parametrize("path", TIPS, ids=lambda p: p.stem)
def test_every_tip_decides_with_the_helpers(path):
    """Every tip decides through decide() (so the build can re-derive it) and prints through report()."""
    names = {n.name for n in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(n, ast.FunctionDef)}
    assert {"decide", "report"} <= names, f"{path.name} does not copy decide() and report()"
    tip = tipmeta.read_tip(path)
    if tip.kind in ("speed", "memory"):
        assert names & {"compare_times", "compare_values"}, f"{path.name} measures without compare_*()"


def test_helpers_list_is_every_copyable_function():
    tree = ast.parse(open(tipkit.__file__, encoding="utf-8").read())
    defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert list(tipkit.HELPERS) == defined[: len(tipkit.HELPERS)]


def test_copied_helpers_fit_88_columns():
    for name, text in tipcheck.reference_helpers().items():
        long = [ln for ln in text.splitlines() if len(ln) > 88]
        assert not long, f"{name}: lines over 88 characters scroll sideways on the page: {long}"


@pytest.mark.parametrize("n", [6, 7, 10, 15, 25, 40])
def test_the_median_interval_covers_the_median_at_least_95_percent(n):
    """Order-statistic intervals are distribution-free: check by simulation, skewed samples too."""
    rng = random.Random(n)
    covered = 0
    trials = 2000
    for _ in range(trials):
        sample = [rng.lognormvariate(0, 0.5) for _ in range(n)]  # true median 1.0
        _, low, high = tipkit.median_interval(sample)
        covered += low <= 1.0 <= high
    assert covered / trials >= 0.94


def test_the_interval_narrows_with_rounds():
    rng = random.Random(0)
    width = {}
    for n in (6, 40):
        sample = [rng.gauss(1.0, 0.1) for _ in range(n)]
        _, low, high = tipkit.median_interval(sample)
        width[n] = high - low
    assert width[40] < width[6]


def test_outcome_is_on_a_side_only_when_the_whole_interval_is():
    assert tipkit.outcome(1.06, 1.2, 1.05) == "above"
    assert tipkit.outcome(0.8, 1.04, 1.05) == "below"
    assert tipkit.outcome(1.0, 1.1, 1.05) == "noise"


def _comparison(name, ratios, threshold=1.05, x=None):
    base = [r * 1e-3 for r in ratios]
    cand = [1e-3] * len(ratios)
    return tipkit.compare_values(name, {"slow": base, "fast": cand}, threshold=threshold, device="cpu",
                                 metric="time", unit="s", x=x)


CASES = [("holds", {"speed-up": "all above"}), ("wrong", {"speed-up": "none above"}), ("depends", {})]


def test_decide_and_rederive_agree_on_random_evidence():
    rng = random.Random(1)
    for _ in range(300):
        comps = [_comparison(f"size {i}", [rng.uniform(0.8, 1.4) for _ in range(rng.randint(1, 12))])
                 for i in range(rng.randint(1, 4))]
        fact = rng.choice([True, False])
        cases = [("outdated", {"old api": True}), *CASES]
        decision = tipkit.decide("cpu", cases, groups={"speed-up": comps}, facts={"old api": fact})
        verdict, problems = tipkit.rederive(copy.deepcopy(decision))
        assert problems == [] and verdict == decision["verdict"]


def test_rederive_refuses_a_verdict_the_evidence_does_not_give():
    comps = [_comparison("size 1", [1.3] * 8)]
    decision = tipkit.decide("cpu", CASES, groups={"speed-up": comps})
    assert decision["verdict"] == "holds"
    forged = {**decision, "verdict": "wrong"}
    assert "the verdict is 'wrong' but the recorded evidence gives 'holds'" in tipkit.rederive(forged)[1]


def test_rederive_refuses_forged_figures():
    decision = tipkit.decide("cpu", CASES, groups={"speed-up": [_comparison("size 1", [1.0, 1.01, 0.99, 1.0, 1.02, 1.0])]})
    forged = copy.deepcopy(decision)
    forged["comparisons"][0]["outcome"] = "above"
    assert any("outcome 'above' is not what its interval gives" in p for p in tipkit.rederive(forged)[1])
    forged = copy.deepcopy(decision)
    forged["comparisons"][0]["ratios"] = [2.0] * 6
    assert any("its ratios are not its samples' ratios" in p for p in tipkit.rederive(forged)[1])
    forged = copy.deepcopy(decision)
    forged["comparisons"][0]["median"] = 1.5
    assert any("median or interval differs" in p for p in tipkit.rederive(forged)[1])


def test_inside_the_noise_maps_to_one_verdict():
    """A ratio whose interval straddles the threshold reads the same every time: 'none above'."""
    noisy = [_comparison(f"size {i}", [0.95, 1.0, 1.05, 1.1, 1.15, 1.02]) for i in range(3)]
    assert all(c["outcome"] == "noise" for c in noisy)
    assert tipkit.decide("cpu", CASES, groups={"speed-up": noisy})["verdict"] == "wrong"


def test_compare_times_measures_a_real_difference():
    """Two callables of very different cost: the slower one's ratio is above the threshold."""
    import torch

    torch.set_num_threads(1)  # as the tips: a busy shared machine stalls multi-threaded small ops
    x, y = torch.randn(512, 512), torch.randn(4)
    c = tipkit.compare_times("matmul vs add", {"matmul": lambda: x @ x, "add": lambda: y + y},
                             threshold=1.5, device="cpu", round_s=0.005, budget_s=2.0)
    assert c["outcome"] == "above" and len(c["ratios"]) >= 6
    assert c["median"] == statistics.median(c["ratios"])

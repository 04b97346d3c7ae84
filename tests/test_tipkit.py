"""The helpers every tip imports (tipsite/tipkit.py): every download carries them and runs the same
code, the interval covers, and the build's re-derivation catches any verdict the evidence does
not give."""

from __future__ import annotations

import ast
import copy
import random
import statistics
from pathlib import Path

import pytest

from tipsite import tipkit, tipmeta, tipsource

TIPS = tipmeta.tip_files()


@pytest.mark.parametrize("path", TIPS, ids=lambda p: p.stem)
def test_every_tip_imports_its_helpers_and_its_download_carries_them(path):
    """A tip imports the helpers (one statement) and defines none of them; its download replaces
    that statement with the helpers' source, so it imports no project code, and is the same
    version of the tip (tipsite/tipsource.py)."""
    source = path.read_text(encoding="utf-8")
    parsed = tipsource.parse(source, path)
    assert len(parsed.imports) == 1 and not parsed.copies, f"{path.name}: import the helpers, do not copy them"
    above = source.splitlines()[:parsed.imports[0].lineno - 1]
    headings = [above[i - 1] for i, line in enumerate(above) if i and line.startswith("# ---")]
    assert headings and headings[-1] == "# How this tip measures and decides", (
        f"{path.name}: the helpers' import belongs in the 'How this tip measures and decides' cell")
    download = tipsource.inline(source, path)
    tree = ast.parse(download)
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                and "tipsite" in ast.unparse(n)], f"{path.name}: its download imports project code"
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert set(parsed.used) <= defined
    assert tipsource.version(download, path) == tipsource.version(source, path)


@pytest.mark.parametrize("path", TIPS, ids=lambda p: p.stem)
def test_every_tip_decides_with_the_helpers(path):
    """Every tip decides through decide() (so the build can re-derive it) and prints through report()."""
    names = {a.name for n in tipsource.parse(path.read_text(encoding="utf-8"), path).imports for a in n.names}
    assert {"decide", "report"} <= names, f"{path.name} does not import decide() and report()"
    tip = tipmeta.read_tip(path)
    if tip.kind in ("speed", "memory"):
        assert names & {"compare_times", "compare_values"}, f"{path.name} measures without compare_*()"


def test_helpers_list_is_every_function_a_download_can_carry():
    tree = ast.parse(open(tipkit.__file__, encoding="utf-8").read())
    defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert list(tipkit.HELPERS) == defined[: len(tipkit.HELPERS)]
    assert sorted(tipkit.HELPERS) == sorted(tipkit.DECIDES + tipkit.PRESENTS)


# --- a tip's version: what decides, not what presents --------------------------------------------

def _tipkit_with(monkeypatch, tmp_path, old: str, new: str):
    """tipsite/tipkit.py with ``old`` replaced by ``new``, read by tipsource from a copy."""
    text = Path(tipkit.__file__).read_text(encoding="utf-8")
    assert old in text
    copy = tmp_path / "tipkit.py"
    copy.write_text(text.replace(old, new, 1), encoding="utf-8")
    monkeypatch.setattr(tipkit, "__file__", str(copy))


def test_a_change_to_how_results_print_leaves_every_version_alone(monkeypatch, tmp_path):
    before = {p.stem: tipsource.file_version(p) for p in TIPS}
    _tipkit_with(monkeypatch, tmp_path, 'print(f"Rule: {rule}")', 'print(f"The rule: {rule}")')
    assert {p.stem: tipsource.file_version(p) for p in TIPS} == before
    _tipkit_with(monkeypatch, tmp_path, "ax.legend(fontsize=10,", "ax.legend(fontsize=11,")
    assert {p.stem: tipsource.file_version(p) for p in TIPS} == before


def test_a_change_to_how_tips_measure_or_decide_makes_their_records_older_versions(monkeypatch, tmp_path):
    timing = {p.stem for p in TIPS if "compare_times" in tipsource.parse(p.read_text(), p).used}
    before = {p.stem: tipsource.file_version(p) for p in TIPS}
    _tipkit_with(monkeypatch, tmp_path, "round_s=0.02, margin", "round_s=0.05, margin")
    changed = {p.stem for p in TIPS if tipsource.file_version(p) != before[p.stem]}
    assert changed == timing and len(timing) > 10
    _tipkit_with(monkeypatch, tmp_path, "k = max(k, 1)", "k = max(k, 2)")  # median_interval
    measuring = {p.stem for p in TIPS if "median_interval" in tipsource.parse(p.read_text(), p).used}
    changed = {p.stem for p in TIPS if tipsource.file_version(p)["helpers_sha256"] != before[p.stem]["helpers_sha256"]}
    assert changed == measuring and timing < measuring


def test_prose_and_printing_leave_a_record_current_code_does_not(tmp_path):
    path = TIPS[0]
    source = path.read_text(encoding="utf-8")
    v = tipsource.version(source, path)
    prose = source.replace("# %%\n", "# %%\n# A new line of prose.\n", 1).replace('"""\n', '"""\nMore words.\n', 1)
    assert tipsource.version(prose, path) == v
    code = source.replace("import torch\n", "import torch\nimport math\n", 1)
    assert tipsource.version(code, path)["code_sha256"] != v["code_sha256"]


def test_helpers_fit_88_columns():
    """Every download shows them: no code block scrolls sideways."""
    for name, text in tipsource.helper_sources().items():
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


# --- GPU timings: busy time, the host-bound points, calibration (issue "GPU timings") -------------

def _gpu_point(name, ratios, busy=(0.9, 0.9), threshold=1.1):
    """A comparison as compare_times makes it on a GPU, with the GPU busy these shares."""
    c = tipkit.compare_values(name, {"slow": [r * 1e-3 for r in ratios], "fast": [1e-3] * len(ratios)},
                              threshold=threshold, device="cuda", metric="time", unit="s")
    c["window"] = {"base": 1e-3, "cand": 1e-3}
    c["device_time"] = {"base": busy[0] * 1e-3, "cand": busy[1] * 1e-3}
    c["bound"] = "device" if min(busy) >= tipkit.BUSY_MIN else "host"
    c["margin"] = "clear"
    return c


def _gpu_decision(points, about="device"):
    from unittest import mock

    with mock.patch.object(tipkit, "calibrate", return_value={"matmul_float16": 1e15}):
        return tipkit.decide("cuda", CASES, groups={"speed-up": points}, key=points[0], about=about)


def test_a_host_bound_point_never_decides_a_claim_about_gpu_work():
    fast_host_bound = _gpu_point("small", [2.0] * 8, busy=(0.1, 0.3))
    slow_gpu_bound = _gpu_point("large", [1.0] * 8, busy=(0.95, 0.97))
    d = _gpu_decision([fast_host_bound, slow_gpu_bound])
    assert d["verdict"] == "wrong" and d["state"]["speed-up"] == ["below"]  # only the GPU-bound point
    assert tipkit.rederive(copy.deepcopy(d)) == ("wrong", [])
    only_host = _gpu_decision([fast_host_bound])
    assert only_host["verdict"] == "inconclusive" and "busiest: 10%" in only_host["why"]
    assert tipkit.rederive(copy.deepcopy(only_host)) == ("inconclusive", [])
    assert _gpu_decision([fast_host_bound], about="host")["verdict"] == "holds"  # a claim about overhead
    forged = copy.deepcopy(only_host)
    forged["comparisons"][0]["bound"] = "device"
    assert any("bound 'device' is not what its busy shares give" in p for p in tipkit.rederive(forged)[1])
    forged = copy.deepcopy(only_host)
    forged["verdict"] = "holds"
    assert any("gives 'inconclusive'" in p for p in tipkit.rederive(forged)[1])


def test_the_printed_report_says_of_a_host_bound_point_what_the_verdict_did(capsys):
    """report() tells a reader whether a host-bound point decided, as decide() counted it: left
    out under a claim about GPU work, counted under one about the host or where none is named."""
    host_bound = _gpu_point("small", [2.0] * 8, busy=(0.1, 0.3))
    device_bound = _gpu_point("large", [2.0] * 8, busy=(0.95, 0.97))
    for about, verdict, says in (("device", "holds", "does not decide"), ("host", "holds", "it counts"),
                                 (None, "holds", "it counts")):
        d = _gpu_decision([host_bound, device_bound], about=about)
        assert d["verdict"] == verdict and len(d["state"]["speed-up"]) == (1 if about == "device" else 2)
        tipkit.report(d, "rule")
        printed = capsys.readouterr().out
        assert "host-bound" in printed and says in printed, (about, printed)


def test_gpu_time_never_exceeds_wall_time():
    from tipsite import records

    point = _gpu_point("x", [1.2] * 8, busy=(1.4, 0.9))
    assert any("GPU time exceeds its wall time" in p for p in tipkit.rederive(
        {**_gpu_decision([_gpu_point("y", [1.2] * 8)]), "comparisons": [point]})[1])
    import json

    d = json.loads(json.dumps(_gpu_decision([_gpu_point("y", [1.2] * 8)])))  # as recorded
    assert records.decision_problems(copy.deepcopy(d), "cuda") == []
    bare = copy.deepcopy(d)
    del bare["calibration"]
    assert "GPU timings without the GPU's calibration (tipkit.calibrate)" in records.decision_problems(bare, "cuda")


def test_the_busy_threshold_is_the_one_compare_times_applies():
    assert f"min(shares) >= {tipkit.BUSY_MIN}" in tipsource.helper_sources()["compare_times"]


def test_compare_times_keeps_measuring_while_the_interval_ends_near_the_threshold():
    """A ratio of about 1.06 against 1.05: more rounds than the minimum, then a 'thin' margin."""
    import torch

    torch.set_num_threads(1)
    x = torch.randn(64, 64)
    c = tipkit.compare_times("same work", {"a": lambda: x @ x, "b": lambda: x @ x}, threshold=1.0,
                             device="cpu", round_s=0.002, budget_s=0.5, min_rounds=6, max_rounds=12)
    assert c["margin"] in ("clear", "thin") and "device_time" not in c
    if c["outcome"] == "noise" or min(abs(c["low"] - 1), abs(c["high"] - 1)) < 0.03:
        assert c["margin"] == "thin" and len(c["ratios"]) > 6


def test_a_claim_about_both_names_each_group_s_side():
    """tip_torch_compile's small tensors are about the host's overhead, its large ones about GPU
    work: per group, a host-bound small point counts and a host-bound large point does not."""
    from unittest import mock

    small = _gpu_point("small", [1.5] * 8, busy=(0.1, 0.2))
    large = _gpu_point("large", [1.5] * 8, busy=(0.2, 0.3))
    cases = [("holds", {"small tensors": "all above", "large tensors": "all above"}), ("depends", {})]
    with mock.patch.object(tipkit, "calibrate", return_value={"matmul_float16": 1e15}):
        d = tipkit.decide("cuda", cases, groups={"small tensors": [small], "large tensors": [large]},
                          about={"small tensors": "host"})
    assert d["verdict"] == "inconclusive" and "large tensors" in d["why"] and "small" not in d["why"]
    assert tipkit.rederive(copy.deepcopy(d)) == ("inconclusive", [])
    with mock.patch.object(tipkit, "calibrate", return_value={"matmul_float16": 1e15}):
        both_host = tipkit.decide("cuda", cases, groups={"small tensors": [small], "large tensors": [large]},
                                  about={"small tensors": "host", "large tensors": "host"})
    assert both_host["verdict"] == "holds" and tipkit.rederive(copy.deepcopy(both_host)) == ("holds", [])


LIMIT = 3  # a constant the rank functions read: sent to rank 1 as code


def _join(rank, base):
    return {"rank": rank, "base": base}


def _who(me):
    import os

    return [me["rank"], me["base"], os.getpid(), _limited(me["base"])]


def _limited(n):  # a function of this module that a rank function calls
    return min(n, LIMIT)


class _Scaled:  # classes of this module that a rank function uses: sent as their statement
    def __init__(self, n):
        self.n = n

    def scaled(self):
        return self.n * LIMIT


class _Doubled(_Scaled):
    def scaled(self):
        return 2 * super().scaled()


def _classes(me):
    return _Doubled(me["base"]).scaled()


def _noisy(me):
    import os

    print("a line from Python")
    os.write(1, b"[Gloo] a line from C++ on fd 1\n")
    return 7


def _boom(me):
    raise ValueError("rank one broke")


def _mark(me):
    import os

    return os.environ.get("TIPS_TEST_MARK")


def _leave(me):
    return "left"


def test_two_ranks_answer_in_order_keep_stdout_for_answers_and_say_why_rank_1_stopped():
    """TwoRanks (the distributed tips' harness): rank 0 here, rank 1 in a fresh process running
    the same ordinary functions (sent as their source, with the functions and constants they
    use); what rank 1 prints, from Python or C++, never reaches its answers; a rank 1 that
    raises fails rank 0 with rank 1's error."""
    import os

    ranks = tipkit.TwoRanks(_join, 5, env={"TIPS_TEST_MARK": "1"})
    try:
        (r0, base0, pid0, lim0), (r1, base1, pid1, lim1) = ranks.both(_who)
        assert (r0, r1, base0, base1, lim0, lim1) == (0, 1, 5, 5, 3, 3)
        assert pid0 == os.getpid() != pid1
        assert ranks.both(_noisy) == (7, 7) and ranks.on_rank_1(_who)[0] == 1
        assert ranks.both(_classes) == (30, 30)
        assert ranks.both(_mark) == (os.environ.get("TIPS_TEST_MARK"), "1")  # env: rank 1's only
        with pytest.raises(RuntimeError, match="rank one broke"):
            ranks.on_rank_1(_boom)
    finally:
        ranks.peer.proc.kill()


def test_two_ranks_close_runs_leave_and_ends_rank_1():
    ranks = tipkit.TwoRanks(_join, 0, leave=_leave)
    ranks.close()
    assert ranks.peer.proc.returncode == 0


def test_peer_refuses_a_function_that_reads_what_cannot_travel_as_code():
    """A global that is no module, function or literal (a tensor, an open file) cannot be sent:
    the peer says which, instead of failing in the other process with a NameError."""
    peer = tipkit.Peer(_join, 0, 1)
    try:
        with pytest.raises(TypeError, match="_UNSENDABLE"):
            peer.call(_reads_unsendable)
        assert peer.call(_who)[:2] == [0, 1]
    finally:
        peer.close()
    assert peer.proc.returncode == 0


_UNSENDABLE = object()


def _sleep(me, seconds):
    import time

    time.sleep(seconds)
    return seconds


def test_peer_times_out_an_answer_not_an_idle_peer():
    """``timeout_s`` bounds each wait for an answer: a peer left idle longer than that between
    calls lives on (a page plots, a tip measures for minutes), one that does not answer in time
    is killed and fails the call."""
    import time

    peer = tipkit.Peer(_join, 0, 1, timeout_s=2)
    try:
        time.sleep(3)
        assert peer.call(_sleep, 0.1) == 0.1
        with pytest.raises(RuntimeError, match="the other process stopped"):
            peer.call(_sleep, 30)
    finally:
        peer.proc.kill()


def _reads_unsendable(me):
    return repr(_UNSENDABLE)


def test_check_plausible_fails_a_speed_up_beyond_what_the_resources_allow():
    """Two processes on two cores cannot train 5x faster than one: an interval wholly above
    the bound is a measurement defect and fails the tip, naming the bound's reason; an interval
    that reaches down to the bound passes, unchanged."""
    free = {"needed": 2, "others": 0.0, "free": True}
    fine = {"name": "DDP", "median": 2.1, "low": 1.8, "high": 2.4, "cores": free}
    assert tipkit.check_plausible(fine, at_most=2, because="2 processes") is fine
    with pytest.raises(RuntimeError, match="more than the 2x that 2 processes on 2 cores"):
        tipkit.check_plausible({"name": "DDP", "median": 5.0, "low": 4.0, "high": 9.0,
                                "cores": free}, at_most=2, because="2 processes on 2 cores")
    # no cores reading (a comparison of an older format): contention cannot be ruled out
    unread = {"name": "DDP", "median": 5.0, "low": 4.0, "high": 9.0}
    assert tipkit.check_plausible(unread, at_most=2, because="2 processes") is unread
    # timed while other processes took the cores (record format "cores"): it decides nothing
    # and is never published, and the contention explains it: no defect of the tip's
    busy = {"name": "DDP", "median": 15.5, "low": 6.4, "high": 39.1,
            "cores": {"needed": 2, "others": 1.85, "free": False}}
    assert tipkit.check_plausible(busy, at_most=2, because="2 processes") is busy
    with pytest.raises(RuntimeError):
        tipkit.check_plausible({**busy, "cores": {"needed": 2, "others": 0.0, "free": True}},
                               at_most=2, because="2 processes")


def test_gpu_busy_time_counts_kernels_not_the_spans_of_labels(monkeypatch):
    """On a GPU, torch.profiler reports each record_function label (Optimizer.step, a
    DataLoader's __next__) as a CUDA event from its first kernel to its last: counted as busy,
    it would fill the host's gaps between them and make a host-bound step look device-bound.
    Both variants are profiled in one session (one profiler start-up, issue 30's slot): each
    pass's records are its own, a kernel stamped a little before its pass's label (clock
    skew between CUPTI and the host) included."""
    import time
    from types import SimpleNamespace

    import torch
    from torch.autograd import DeviceType

    def event(start, end, label=False, name="kernel", device=DeviceType.CUDA):
        return SimpleNamespace(time_range=SimpleNamespace(start=start, end=end), name=name,
                               device_type=device, is_user_annotation=label)

    class Profile:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def events(self):
            cpu = DeviceType.CPU
            return [  # pass 0: two 10 us kernels inside a 2 ms label, launched by the host
                event(0.0, 2000.0, label=True, name="tips pass 0", device=cpu),
                event(0.0, 2000.0, label=True, name="Optimizer.step"),
                event(0.0, 10.0), event(1990.0, 2000.0),
                event(1.0, 2.0, name="cudaLaunchKernel", device=cpu),
                event(1980.0, 1981.0, name="cudaLaunchKernel", device=cpu),
                # pass 1: one 30 us kernel, stamped 2 us before its label starts
                event(3000.0, 4000.0, label=True, name="tips pass 1", device=cpu),
                event(2998.0, 3028.0),
                event(3001.0, 3002.0, name="cudaLaunchKernel", device=cpu)]

    monkeypatch.setattr(torch.profiler, "profile", Profile)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    (busy, wall, kernels, launches), (busy1, _, kernels1, launches1) = tipkit.device_busy(
        [(lambda: time.sleep(0.003), 1), (lambda: time.sleep(0.001), 2)], "cuda")
    assert busy == pytest.approx(20e-6) and wall >= 0.003 and (kernels, launches) == (2, 2)
    assert busy1 == pytest.approx(15e-6) and (kernels1, launches1) == (1, 1)  # 30 us, 2 calls


def test_peer_sends_functions_and_classes_of_a_page_run_as_sphinx_gallery_runs_it(tmp_path):
    """sphinx-gallery executes a page's blocks with ``exec`` in a fake ``__main__`` that has
    no ``__file__`` (inspect.getsource cannot find a class there): the peer still finds each
    function's and class's statement in the file the code was compiled from."""
    import importlib.util
    import os
    import sys
    import textwrap

    page = tmp_path / "page.py"
    page.write_text(textwrap.dedent('''
        import os

        SCALE = 4


        class Base:
            def value(self, n):
                return n * SCALE


        class Doubled(Base):
            def value(self, n):
                return 2 * super().value(n)


        def start(n):
            return {"n": n}


        def answer(me):
            return [Doubled().value(me["n"]), os.getpid()]
        '''), encoding="utf-8")
    fake_main = importlib.util.module_from_spec(importlib.util.spec_from_loader("__main__", None))
    old_main = sys.modules["__main__"]
    sys.modules["__main__"] = fake_main
    try:
        exec(compile(page.read_text(encoding="utf-8"), str(page), "exec"), fake_main.__dict__)
        peer = tipkit.Peer(fake_main.start, 3)
        try:
            value, pid = peer.call(fake_main.answer)
        finally:
            peer.close()
    finally:
        sys.modules["__main__"] = old_main
    assert value == 24 and pid != os.getpid()




# --- issue 30/31: busy cores, thin margins, the one verdict rule, a blind profiler ---------------

def _cores(free, needed=2, machine=2):
    others = 0.1 if free else 1.2
    return {"needed": needed, "machine": machine, "others": others, "free": free}


def test_a_timing_whose_cores_were_not_free_never_decides():
    """31.1: other processes took the cores a deciding timing needed: "busy", whatever the
    ratios say, and the build re-derives it; a forged "free" is caught."""
    fast = _comparison("size 1", [1.3] * 8)
    fast["cores"] = _cores(False)
    d = tipkit.decide("cpu", CASES, groups={"speed-up": [fast]})
    assert d["verdict"] == "busy" and "size 1" in d["why"] and "others used 1.2" in d["why"]
    assert tipkit.rederive(copy.deepcopy(d)) == ("busy", [])
    forged = copy.deepcopy(d)
    forged["comparisons"][0]["cores"]["free"] = True
    assert any("cores free True is not what" in p for p in tipkit.rederive(forged)[1])
    fast["cores"] = _cores(True)
    assert tipkit.decide("cpu", CASES, groups={"speed-up": [fast]})["verdict"] == "holds"
    # one core needed of two: another process on the other core leaves it free
    assert tipkit.cores_free({"needed": 1, "machine": 2, "others": 0.9, "free": True}) is True
    assert tipkit.cores_free({"needed": 2, "machine": 2, "others": 0.3, "free": False}) is False
    # a timing no case tests does not make the verdict busy
    idle = _comparison("unused", [1.3] * 8)
    idle["cores"] = _cores(False)
    fast["cores"] = _cores(True)
    d = tipkit.decide("cpu", CASES, groups={"speed-up": [fast], "other": [idle]})
    assert d["verdict"] == "holds"


def test_compare_times_records_whether_its_cores_were_free():
    import torch

    torch.set_num_threads(1)
    x = torch.randn(32, 32)
    c = tipkit.compare_times("x", {"a": lambda: x @ x, "b": lambda: x + x}, threshold=1.0,
                             device="cpu", round_s=0.002, budget_s=0.2, cores=1)
    assert set(c["cores"]) == {"needed", "machine", "others", "free"}
    assert c["cores"]["needed"] == 1 and c["cores"]["free"] == tipkit.cores_free(c["cores"])


def test_a_verdict_an_interval_touching_its_threshold_decides_is_not_settled():
    """31.1: an interval ending within 3% of the threshold decides nothing on its own: where
    reading it as noise changes the verdict, the verdict is "depends", and why says so."""
    thin = _comparison("size 1", [1.06, 1.07, 1.08, 1.07, 1.09, 1.07, 1.08, 1.07])  # low 1.06 > 1.05
    assert thin["outcome"] == "above"
    d = tipkit.decide("cpu", CASES, groups={"speed-up": [thin]})
    assert d["verdict"] == "depends" and "'holds' is not settled" in d["why"] and "'wrong'" in d["why"]
    assert tipkit.rederive(copy.deepcopy(d)) == ("depends", [])
    clear = _comparison("size 2", [1.3] * 8)
    assert tipkit.decide("cpu", CASES, groups={"speed-up": [clear]})["verdict"] == "holds"
    # a thin outcome that cannot change the verdict leaves it settled
    cases = [("holds", {"speed-up": "any above"}), ("depends", {})]
    assert tipkit.decide("cpu", cases, groups={"speed-up": [thin, clear]})["verdict"] == "holds"
    # a record made before the rule (no "settle") re-derives as its rule was
    old = copy.deepcopy(d)
    del old["settle"]
    old["verdict"], old["why"] = "holds", None
    assert tipkit.rederive(old) == ("holds", [])


def test_decide_and_rederive_agree_on_every_condition_kind():
    """Synthetic decisions over every group condition, fact conditions (values and lists), GPU
    points host- or device-bound with each ``about``, busy cores and thin margins."""
    from unittest import mock

    rng = random.Random(7)
    seen = set()
    for _ in range(400):
        device = rng.choice(["cpu", "cuda"])
        groups = {}
        for g in ("a", "b"):
            comps = []
            for i in range(rng.randint(1, 3)):
                ratios = [rng.choice([rng.uniform(0.9, 1.2), 1.06]) for _ in range(rng.randint(3, 10))]
                c = _comparison(f"{g}{i}", ratios)
                if device == "cuda":
                    c = _gpu_point(f"{g}{i}", ratios, busy=rng.choice([(0.9, 0.8), (0.2, 0.9)]),
                                   threshold=1.05)
                if rng.random() < 0.3:
                    c["cores"] = _cores(rng.random() < 0.8)
                comps.append(c)
            groups[g] = comps
        cases = [(rng.choice(["holds", "wrong", "outdated"]),
                  {rng.choice(["a", "b"]): rng.choice([*tipkit.GROUP_CONDITIONS,
                                                       list(rng.sample(tipkit.GROUP_CONDITIONS, 2))]),
                   "flag": rng.choice([True, False, [True, False], "x", ["x", "y"]])})
                 for _ in range(rng.randint(1, 3))] + [("depends", {})]
        about = rng.choice([None, "device", "host", {"a": "host"}])
        with mock.patch.object(tipkit, "calibrate", return_value={"matmul_float16": 1e15}):
            d = tipkit.decide(device, cases, groups=groups, facts={"flag": rng.choice([True, "x"])},
                              about=about)
        d = json_roundtrip(d)
        assert tipkit.rederive(copy.deepcopy(d)) == (d["verdict"], []), d
        seen.add(d["verdict"])
    assert {"busy", "depends", "inconclusive", "holds"} <= seen, seen


def json_roundtrip(value):
    import json

    return json.loads(json.dumps(value))


def test_every_reader_of_a_decision_applies_the_one_rule():
    """30.6: decide, rederive, report and the pages' deciding_comparisons call tipkit.judge."""
    from tipsite.sphinxext import view

    sources = tipsource.helper_sources()
    for name in ("decide", "report"):
        assert "judge(" in sources[name], name
    import inspect

    assert "judge(" in inspect.getsource(tipkit.rederive)
    assert "tipkit.deciding_comparisons" in inspect.getsource(view.deciding_comparisons)
    host_bound = _gpu_point("small", [2.0] * 8, busy=(0.1, 0.3))
    device_bound = _gpu_point("large", [2.0] * 8, busy=(0.95, 0.97))
    d = _gpu_decision([host_bound, device_bound])
    assert [c["name"] for c in view.deciding_comparisons(d)] == ["large"]
    assert [c["name"] for c in view.deciding_comparisons(_gpu_decision([host_bound, device_bound],
                                                                      about="host"))] == ["small", "large"]


def _fake_gpu_pass(monkeypatch, busy_s, profiled_s, records, launches=10):
    monkeypatch.setattr(tipkit, "device_busy", lambda passes, device: [
        (busy_s, profiled_s, records, launches) for _ in passes])


def test_a_blind_profiler_fails_the_comparison_loudly(monkeypatch):
    """30.3: GPU work launched, no activity recorded: the tip fails naming the comparison,
    instead of a silent host-bound point and an "inconclusive" verdict."""
    import time

    _fake_gpu_pass(monkeypatch, 0.0, 1e-3, records=0)
    with pytest.raises(RuntimeError, match=r"compare_times\('blind point'\).*no GPU activity"):
        tipkit.compare_times("blind point", {"a": lambda: time.sleep(1e-4), "b": lambda: time.sleep(1e-4)},
                             threshold=1.1, device="cuda", round_s=0.002, budget_s=0.05)


def test_the_bound_is_judged_on_the_timed_work_not_the_profiled_pass(monkeypatch):
    """30.4: a profiled pass slowed by the profiler (10 ms a call) must not make a point whose
    timed calls (about 2 ms) kept the GPU busy host-bound; the overhead is stated. The GPU was
    busy 4.9 ms of the 10 ms profiled pass (49%: host-bound if judged there), which covers
    every timed call even when a loaded machine stretches the 2 ms sleep up to 9.8 ms."""
    import time

    _fake_gpu_pass(monkeypatch, 4.9e-3, 10e-3, records=4)
    c = tipkit.compare_times("point", {"a": lambda: time.sleep(2e-3), "b": lambda: time.sleep(2e-3)},
                             threshold=1.1, device="cuda", round_s=0.004, budget_s=0.1)
    assert c["bound"] == "device", c["window"]
    assert c["window"]["base"] == statistics.median(c["base"])
    assert c["profiled"] == {"base": 10e-3, "cand": 10e-3} and c["kernels"] == {"base": 4, "cand": 4}

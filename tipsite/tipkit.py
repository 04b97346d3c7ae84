"""The helpers every tip imports: measure, decide, report, draw; and, for the tips that need
them, read how busy the machine's CPUs were and run a second rank.

A tip imports the functions (and the one class) of :data:`HELPERS` it uses in its "How this tip measures and decides"
cell (``from tipsite.tipkit import compare_times, decide, report``). A reader downloads and runs a
tip on its own, without this project, so the build runs and publishes the tip's *download*, in
which that import is replaced by these functions' source (:mod:`tipsite.tipsource`). Each helper
therefore imports what it needs inside its body and uses only torch, numpy, matplotlib and the
standard library. :data:`DECIDES` are the ones whose change makes a tip's records an older
version's; :data:`PRESENTS` only print and draw. The build re-derives each verdict from the
evidence its decision records (:func:`rederive`): a verdict the recorded measurements do not give
fails the build, naming the tip and the device.

The vocabulary:

* A **comparison** pits the anti-pattern (``baseline``) against the recommended pattern
  (``candidate``) on one device. It holds paired samples, one pair per *round*, and per round the
  ratio ``baseline / candidate`` (how many times faster, or smaller, the candidate is) or their
  difference. :func:`compare_times` times two callables in alternating rounds and adds rounds
  while the interval straddles the threshold; :func:`compare_values` takes samples measured by
  other means (bytes, counts).
* Its **interval** is a distribution-free confidence interval (~95%) for the median ratio, from
  the order statistics of the rounds; with 5 rounds or fewer it is their whole range. Its
  **outcome** is ``"above"`` when the whole interval lies above the threshold, ``"below"`` when it
  lies below, and ``"noise"`` when it straddles it: more rounds on this machine would not say which
  side it is on, and the rule maps that to a fixed verdict.
* A **decision** (:func:`decide`) is the verdict for one device: the first *case* whose conditions
  all hold. A condition tests a *group* of comparisons (``"all above"``, ``"none above"``, ...)
  or a *fact*, another observation the tip made on that device (an error raised, a flag, a dtype).

Helpers keep lines within 88 characters: every download shows them, and no code block scrolls
sideways.
"""

from __future__ import annotations

# The helpers a tip may copy, in the order they appear below; tests/test_tipkit.py reads this.
HELPERS = ("median_interval", "outcome", "device_busy", "compare_times", "compare_values",
           "calibrate", "judge", "decide", "report", "plot_ratios", "plot_series",
           "cpu_ticks", "others_cores", "cores_were_free", "check_plausible", "Peer",
           "free_port", "TwoRanks")
# What decides a verdict (a change here makes every record of a tip using it an older version's)
# and what only presents it (a change here leaves recorded verdicts current): tipsite/tipsource.py.
DECIDES = ("median_interval", "outcome", "device_busy", "compare_times", "compare_values",
           "calibrate", "judge", "decide", "cpu_ticks", "others_cores", "cores_were_free",
           "check_plausible", "Peer", "free_port", "TwoRanks")
PRESENTS = ("report", "plot_ratios", "plot_series")


def median_interval(values, confidence=0.95):
    """The median of ``values`` and a distribution-free interval for it."""
    import math
    import statistics

    xs = sorted(values)
    n, k, tail = len(xs), 0, 0.0
    # largest k with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2: [x_k, x_(n+1-k)]
    while k < n // 2 and tail + math.comb(n, k) / 2**n <= (1 - confidence) / 2:
        tail += math.comb(n, k) / 2**n
        k += 1
    k = max(k, 1)  # too few rounds for that confidence: the whole range
    return statistics.median(xs), xs[k - 1], xs[n - k]


def outcome(low, high, threshold):
    """'above' or 'below' if the whole interval is on that side, else 'noise'."""
    return "above" if low > threshold else "below" if high < threshold else "noise"


def device_busy(passes, device):
    """What the GPU did in each of ``passes``, ``[(fn, calls), ...]``, profiled at once.

    One torch.profiler session runs every pass in turn, each synchronised inside its
    own ``record_function`` label, so the profiler starts once for all of them (its
    start-up and event processing are the costly part) and each pass's GPU records fall
    within its label. A pass's busy time is the union of its kernel and copy intervals
    (labels' spans left out); its wall time is the host's, synchronised. ``launches``
    counts the host's CUDA launch and copy calls the profiler saw, ``records`` the GPU
    activity records: launches with no records is a profiler blind to this GPU.
    Returns one ``(busy s per call, wall s per call, records, launches)`` per pass; busy
    never exceeds wall. ``(None, None, 0, 0)`` each on the CPU.
    """
    import time

    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    device = torch.device(device)
    if device.type == "cpu":
        return [(None, None, 0, 0) for _ in passes]
    sync = getattr(torch, device.type).synchronize
    sync()
    walls = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i, (fn, calls) in enumerate(passes):
            with record_function(f"tips pass {i}"):
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                sync()
                walls.append(time.perf_counter() - start)
    events = list(prof.events())
    marks = {e.name: e.time_range for e in events if e.device_type != DeviceType.CUDA
             and e.name.startswith("tips pass ")}
    # kernels and copies, not the GPU spans of record_function labels (optimizer.step,
    # DataLoader, the passes' own): they cover the gaps between their kernels
    spans = sorted((e.time_range.start, e.time_range.end) for e in events
                   if e.device_type == DeviceType.CUDA
                   and not getattr(e, "is_user_annotation", False))
    calls_out = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cudaMemcpy", "cuMemcpy",
                 "cudaMemset", "hipLaunch", "hipMemcpy", "hipGraphLaunch")
    launched = [e.time_range.start for e in events if e.device_type != DeviceType.CUDA
                and getattr(e, "name", "").startswith(calls_out)]
    # the passes are synchronised, so none's GPU work runs into the next one's: a record
    # belongs to the pass whose label is nearest (a GPU clock may stamp a little early)
    spans_of = [marks[f"tips pass {i}"] for i in range(len(passes))]
    cuts = [(a.end + b.start) / 2 for a, b in zip(spans_of, spans_of[1:])]

    def owner(t):
        return sum(1 for cut in cuts if t >= cut)

    found = []
    for i, ((_, calls), wall) in enumerate(zip(passes, walls)):
        busy, end = 0.0, float("-inf")
        mine = [(lo, hi) for lo, hi in spans if owner(lo) == i]
        for lo, hi in mine:  # the union of the intervals, in microseconds
            busy += max(0.0, hi - max(lo, end))
            end = max(end, hi)
        launches = sum(1 for t in launched if owner(t) == i)
        busy = min(busy * 1e-6, wall)
        found.append((busy / calls, wall / calls, len(mine), launches))
    return found


def compare_times(name, variants, *, threshold, device, x=None, work=None, cores=None,
                  min_rounds=6, max_rounds=40, budget_s=2.0, round_s=0.02, margin=0.03,
                  busy=True):
    """Time ``{"anti-pattern": f, "recommended": g}`` in alternating rounds.

    Each variant gets a ``torch.utils.benchmark`` timer (which synchronises CUDA around
    the timed calls) and as many calls per round as fit in about ``round_s`` seconds. In
    each round both run, each first in every other round; the ratio per round is
    anti-pattern time / recommended time. Rounds are added while the interval straddles
    ``threshold``, or ends within ``margin`` (3%) of it, up to ``max_rounds`` or
    ``budget_s`` seconds. ``cores`` is how many cores the timed work needs (default:
    torch's threads); the CPU time other processes took meanwhile says whether those
    were free (``"cores"``). On a GPU, one profiled pass per variant (both in one
    profiler session), after the timed rounds and with as many calls as a round,
    measures the GPU's busy time per call (:func:`device_busy`); its share of the
    *timed* rounds' time per call says the bound: ``"device"`` when the GPU was busy
    at least half of it for both, else ``"host"``. A variant whose pass shows no GPU
    activity record fails the tip: a profiler blind to the GPU would make every point
    host-bound (``"kernels"``).
    ``work`` is what one call does, ``{"flops": n}`` or ``{"bytes": n}``, with the
    calibrated limit to compare it with (``"limit": "matmul_float16"``): on a GPU its
    value is attached (``"calibrated"``, :func:`calibrate`). ``busy=False`` skips the
    profiled pass, for a variant that runs a profiler itself (profilers do not nest);
    its point then counts as device-bound.
    """
    import os
    import statistics
    import time

    import torch
    import torch.utils.benchmark as benchmark

    (base_name, base_fn), (cand_name, cand_fn) = variants.items()
    timers, calls = {}, {}
    for label, fn in ((base_name, base_fn), (cand_name, cand_fn)):
        timers[label] = benchmark.Timer("fn()", globals={"fn": fn},
                                        num_threads=torch.get_num_threads())
        timers[label].timeit(1)  # warm up: first-call costs are not the pattern's
        n = 1
        while True:  # double the calls until they take a good part of a round
            total = timers[label].timeit(n).median * n
            if total >= round_s / 2 or n >= 2**20:
                break
            n *= 2
        calls[label] = max(1, round(n * round_s / max(total, 1e-9)))

    def settled(ratios):
        _, low, high = median_interval(ratios)
        side = outcome(low, high, threshold)
        near = min(abs(low - threshold), abs(high - threshold)) < margin * threshold
        return side != "noise" and not near

    base, cand, ratios = [], [], []
    start, before = time.perf_counter(), cpu_ticks()
    while len(ratios) < max_rounds:
        order = [base_name, cand_name]
        if len(ratios) % 2:
            order.reverse()
        seconds = {label: timers[label].timeit(calls[label]).median for label in order}
        base.append(seconds[base_name])
        cand.append(seconds[cand_name])
        ratios.append(base[-1] / cand[-1])
        if len(ratios) >= min_rounds:
            if settled(ratios) or time.perf_counter() - start > budget_s:
                break
    others = others_cores([(before, cpu_ticks())])
    machine = os.cpu_count() or 1
    needed = min(int(cores or torch.get_num_threads()), machine)
    mid, low, high = median_interval(ratios)
    found = {"name": name, "device": torch.device(device).type,
             "threads": torch.get_num_threads(), "x": x, "metric": "time", "unit": "s",
             "measure": "ratio", "baseline": base_name, "candidate": cand_name,
             "base": base, "cand": cand, "ratios": ratios, "median": mid, "low": low,
             "high": high, "threshold": threshold,
             "outcome": outcome(low, high, threshold),
             "margin": "clear" if settled(ratios) else "thin",
             # free: others left the needed cores, less a quarter core (cores_were_free)
             "cores": {"needed": needed, "machine": machine, "others": others,
                       "free": None if others is None
                       else others < machine - needed + 0.25}}
    if torch.device(device).type != "cpu" and busy:
        timed = {base_name: statistics.median(base), cand_name: statistics.median(cand)}
        passes = device_busy([(fn, calls[k]) for k, fn in variants.items()], device)
        seen = dict(zip(variants, passes))
        for k, (_, _, records, launches) in seen.items():
            if records == 0:  # a variant that runs no GPU work is timed with busy=False
                raise RuntimeError(
                    f"compare_times({name!r}): {k!r} ran on {device}, but "
                    f"torch.profiler recorded no GPU activity ({launches} launches "
                    "seen): it cannot see this GPU, so no point can be judged device- "
                    "or host-bound")
        side = {base_name: "base", cand_name: "cand"}
        found["device_time"] = {side[k]: min(s[0], timed[k]) for k, s in seen.items()}
        found["window"] = {side[k]: timed[k] for k in seen}  # the timed work, per call
        found["profiled"] = {side[k]: s[1] for k, s in seen.items()}  # its overhead
        found["kernels"] = {side[k]: s[2] for k, s in seen.items()}
        shares = [found["device_time"][k] / found["window"][k]
                  for k in ("base", "cand")]
        found["bound"] = "device" if min(shares) >= 0.5 else "host"
    if work is not None:
        found["work"] = dict(work)
        limit = calibrate(device).get(work.get("limit"))
        if limit:  # the GPU's calibrated rate the work is measured against
            found["calibrated"] = limit
    return found


def compare_values(name, variants, *, threshold, device, metric, unit, x=None,
                   measure="ratio", cores=None):
    """Compare samples measured otherwise: ``{"anti-pattern": [...], "fix": [...]}``.

    Samples pair up by position, one pair per round. ``measure="ratio"`` compares
    anti-pattern / recommended with ``threshold``; ``"difference"`` compares
    anti-pattern - recommended (for quantities that may be 0, e.g. bytes leaked per
    step). ``cores`` is the ``"cores"`` a timing made otherwise recorded, as
    :func:`compare_times` records it.
    """
    import torch

    (base_name, base), (cand_name, cand) = variants.items()
    if measure == "ratio":
        ratios = [b / c for b, c in zip(base, cand)]
    else:
        ratios = [b - c for b, c in zip(base, cand)]
    mid, low, high = median_interval(ratios)
    found = {"name": name, "device": torch.device(device).type,
             "threads": torch.get_num_threads(), "x": x, "metric": metric, "unit": unit,
             "measure": measure, "baseline": base_name, "candidate": cand_name,
             "base": list(base), "cand": list(cand), "ratios": ratios, "median": mid,
             "low": low, "high": high, "threshold": threshold,
             "outcome": outcome(low, high, threshold)}
    if cores is not None:
        found["cores"] = dict(cores)
    return found


def calibrate(device):
    """What this GPU reaches, measured once per process: the limits for a tip's work.

    A large matmul per dtype (FLOP/s; TF32 off for float32), a device-to-device copy
    and a pinned and a pageable host-to-device copy (bytes/s, each byte counted once per
    pass over memory or the link: a device copy reads and writes; the host buffers are
    written first, so no page is a shared zero page), each timed with CUDA events, best
    of 3; and the host's time per call of a small ``nn.Linear``, as a tip's module
    call launches its kernel (seconds). It also checks that torch.profiler sees the
    GPU: a profiled matmul must show GPU activity, and the share of its time the GPU
    was busy is kept (``profiled_matmul_share``); a blind profiler raises here. ``{}``
    on the CPU.
    """
    import time

    import torch

    device = torch.device(device)
    if device.type == "cpu":
        return {}
    cache = torch.__dict__.setdefault("_tipkit_calibration", {})
    if device.type not in cache:
        backend = getattr(torch, device.type)

        def best(fn, *args):
            fn(*args)  # warm up
            times = []
            for _ in range(3):
                start = backend.Event(enable_timing=True)
                end = backend.Event(enable_timing=True)
                start.record()
                fn(*args)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            return max(min(times), 1e-9)

        found = {}
        # a data-centre GPU (an H100 has 132 SMs) needs large work to reach its limits
        big = backend.get_device_properties(device).multi_processor_count >= 32
        side = 8192 if big else 1024
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            for dtype in (torch.float32, torch.float16, torch.bfloat16):
                n = side // 2 if dtype is torch.float32 else side
                m = torch.randn(n, n, device=device, dtype=dtype)
                name = str(dtype).split(".")[-1]
                found[f"matmul_{name}"] = 2 * n**3 / best(torch.matmul, m, m)
            # the profiler must see this GPU: every busy share depends on it
            m = torch.randn(side, side, device=device, dtype=torch.float16)
            [matmuls] = device_busy([(lambda: m @ m, 3)], device)
            busy, wall, records, launches = matmuls
            if not records or not busy:
                raise RuntimeError(
                    f"calibrate: torch.profiler saw no GPU activity in 3 matmuls on "
                    f"{device} ({records} records, {launches} launches): it is blind "
                    "to this GPU, and every GPU timing would read host-bound")
            found["profiled_matmul_share"] = busy / wall
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        nbytes = 2**28 if big else 2**22
        src = torch.empty(nbytes, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        found["copy_device"] = 2 * nbytes / best(dst.copy_, src)
        pinned = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
        pageable = torch.empty(nbytes, dtype=torch.uint8).fill_(1)  # pages written
        found["copy_h2d_pinned"] = nbytes / best(dst.copy_, pinned, True)
        found["copy_h2d_pageable"] = nbytes / best(dst.copy_, pageable, True)
        layer = torch.nn.Linear(16, 16, device=device)
        tiny = torch.randn(4, 16, device=device)
        for _ in range(100):  # warm up
            layer(tiny)
        backend.synchronize()
        start = time.perf_counter()
        for _ in range(1000):
            layer(tiny)
        found["launch_s"] = (time.perf_counter() - start) / 1000
        backend.synchronize()
        cache[device.type] = found
    return dict(cache[device.type])


def judge(device, cases, groups, facts=None, about=None, settle=0.0):
    """The verdict rule, in one place: what decide, the build and the pages apply.

    ``groups`` maps a name to its comparisons (dicts with ``outcome``, ``low``,
    ``high``, ``threshold``; ``bound`` and ``cores`` where timed), ``facts`` a name to
    a value; ``cases``, ``about`` as :func:`decide` takes them. In this order:

    * ``"busy"`` when a comparison of a group some case tests ran while other
      processes took the cores it needed (its ``cores`` say not free);
    * ``"inconclusive"`` when, on a GPU and for a claim about GPU work, such a group
      has no device-bound comparison left (host-bound points never decide it);
    * else the first case whose conditions hold. Where an outcome above or below
      lies within ``settle`` (relative) of its threshold and reading it as noise
      would give another verdict, the verdict is not settled: ``"depends"``.

    Returns ``{"verdict", "why", "state", "deciding"}``: ``state`` the outcomes
    (groups) and facts the cases read, ``deciding`` each group's comparisons that
    counted. ``verdict`` is None when no case matches. Raises ValueError for a case
    that tests an unknown name or a group with an unknown condition.
    """
    facts = dict(facts or {})
    conditions = [f"{q} {s}" for q in ("all", "any", "none")
                  for s in ("above", "below", "noise")]

    def gpu_work(name):
        claim = about.get(name, "device") if isinstance(about, dict) else about
        return device != "cpu" and claim == "device"

    deciding = {n: [c for c in cs if not gpu_work(n) or c.get("bound", "device")
                    == "device"] for n, cs in groups.items()}
    tested = list(dict.fromkeys(n for _, conds in cases for n in conds))
    for _, conds in cases:
        for n, condition in conds.items():
            accepted = condition if isinstance(condition, list) else [condition]
            if n not in groups and n not in facts:
                raise ValueError(f"a case tests {n!r}, which is neither a fact nor "
                                 "a group")
            if n in groups and not all(a in conditions for a in accepted):
                raise ValueError(f"a case tests group {n!r} with {condition!r}, "
                                 f"not one of {conditions}")

    def first(outcomes):
        def holds(n, a):
            if n not in groups:
                return facts[n] == a
            quantifier, side = a.split()
            hits = [o == side for o in outcomes[n]]
            quantified = {"all": all(hits), "any": any(hits), "none": not any(hits)}
            return quantified[quantifier]

        for verdict, conds in cases:
            if all(any(holds(n, a) for a in (c if isinstance(c, list) else [c]))
                   for n, c in conds.items()):
                return verdict
        return None

    outcomes = {n: [c["outcome"] for c in cs] for n, cs in deciding.items()}
    state = {**facts, **outcomes}
    timed = [c for n in tested if n in groups for c in groups[n]]
    busy = [c for c in timed if (c.get("cores") or {}).get("free") is False]
    empty = [n for n in tested if n in groups and not deciding[n]]
    if busy:
        said = "; ".join(
            f"{c['name']} (needed {c['cores']['needed']} of "
            f"{c['cores'].get('machine', '?')}, others used {c['cores']['others']:g})"
            for c in busy[:3])
        return {"verdict": "busy", "state": state, "deciding": deciding,
                "why": f"other processes took the cores these timings needed: {said}"}
    if empty:
        shares = [min(c["device_time"][k] / c["window"][k] for k in ("base", "cand"))
                  for n in empty for c in groups[n] if "window" in c]
        busiest = max(shares, default=0)
        return {"verdict": "inconclusive", "state": state, "deciding": deciding,
                "why": (f"no point of {', '.join(sorted(empty))} kept the GPU busy "
                        f"half the time (busiest: {busiest:.0%}): the host bound "
                        "them, not the GPU work the claim is about")}
    verdict = first(outcomes)

    def thin(c):
        t = c["threshold"]
        near = min(abs(c["low"] - t), abs(c["high"] - t)) < settle * abs(t)
        return c["outcome"] != "noise" and near

    close = [c for n in tested if n in groups for c in deciding[n] if thin(c)]
    why = None
    if verdict is not None and close:
        unsure = {n: ["noise" if thin(c) else c["outcome"] for c in cs]
                  for n, cs in deciding.items()}
        other = first(unsure)
        if other != verdict:
            said = "; ".join(f"{c['name']} [{c['low']:.3g}, {c['high']:.3g}] against "
                             f"{c['threshold']:g}" for c in close[:3])
            why = (f"{verdict!r} is not settled: an interval ends within "
                   f"{settle:.0%} of its threshold ({said}); read as noise it gives "
                   f"{other!r}")
            verdict = "depends"
    return {"verdict": verdict, "state": state, "deciding": deciding, "why": why}


def decide(device, cases, *, groups=None, facts=None, key=None, about=None,
           settle=0.03):
    """The verdict on ``device``: the first of ``cases`` whose conditions all hold.

    ``groups`` maps a name to a list of comparisons, ``facts`` a name to an observation
    (a bool, number or string measured on ``device``). A case is
    ``(verdict, {name: condition})``. A fact's condition is a value or a list of
    accepted values; a group's is ``"all above"``, ``"any above"``, ``"none above"``
    (or ``below``, ``noise``), or a list of them. The last case has no conditions.
    ``key`` is the comparison, or a ``{"name", "value", "unit"}`` dict, shown as the
    key figure. ``about="device"`` says the claim is about work on a GPU: there a
    comparison the host bound (:func:`compare_times`) never decides, and a group left
    with none makes the verdict ``"inconclusive"``. ``about="host"`` says the claim is
    about the host's overhead, so every point counts. ``about`` may also map a group's
    name to either, for a claim that is about both (groups not named: ``"device"``).
    A timing whose cores were not free makes the verdict ``"busy"``; a verdict that an
    interval within ``settle`` (3%) of its threshold decides is ``"depends"``, and
    ``why`` says which (:func:`judge`, the rule the build re-derives).
    """
    import torch

    device_type = torch.device(device).type
    groups, facts = dict(groups or {}), dict(facts or {})
    try:
        found = judge(device_type, cases, groups, facts, about, settle)
    except ValueError as exc:
        raise ValueError(f"decide: {exc}") from None
    if found["verdict"] is None:
        raise ValueError("no case matched: end with a case that has no conditions")
    if key is not None and "ratios" in key:
        unit = "x" if key["measure"] == "ratio" else key["unit"]
        key = {"name": key["name"], "value": key["median"], "low": key["low"],
               "high": key["high"], "unit": unit, "rounds": len(key["ratios"])}
    comparisons = list({c["name"]: c for cs in groups.values() for c in cs}.values())
    threads = {c["threads"] for c in comparisons} or {torch.get_num_threads()}
    members = {n: [c["name"] for c in cs] for n, cs in groups.items()}
    decided = {"device": device_type, "verdict": found["verdict"], "cases": cases,
               "facts": facts, "groups": members, "comparisons": comparisons,
               "state": found["state"], "key": key, "threads": sorted(threads),
               "about": about, "why": found["why"], "settle": settle}
    if device_type != "cpu":
        decided["calibration"] = calibrate(device)
    return decided


def report(decision, rule):
    """Print each comparison and fact, then the verdict and its rule.

    On a GPU each timing also shows the share of its wall time the GPU was busy, and the
    rate its work reached against this GPU's calibrated limit (:func:`calibrate`).
    """
    import statistics

    limits = decision.get("calibration") or {}
    # as decide() reads it (judge): host-bound points drop out for claims about GPU work
    by_name = {c["name"]: c for c in decision["comparisons"]}
    groups = {n: [by_name[m] for m in ms] for n, ms in decision["groups"].items()}
    counted = {c["name"] for cs in judge(decision["device"], decision["cases"], groups,
                                        decision["facts"], decision.get("about"))[
                                            "deciding"].values() for c in cs}
    for c in decision["comparisons"]:
        unit = "x" if c["measure"] == "ratio" else f" {c['unit']}"
        line = (f"{c['name']}: {c['median']:.3g}{unit} "
                f"[{c['low']:.3g} .. {c['high']:.3g}], {len(c['ratios'])} rounds, "
                f"{c['outcome']} {c['threshold']:.3g}")
        if c.get("margin") == "thin" and c["outcome"] != "noise":
            line += " (thin margin: the interval ends within 3% of the threshold)"
        cores = c.get("cores") or {}
        if cores.get("free") is False:
            line += (f" (machine busy: others used {cores['others']:g} cores, "
                     f"{cores['needed']} needed)")
        print(line)
        for side, label in (("base", c["baseline"]), ("cand", c["candidate"])):
            if "device_time" not in c:
                continue
            wall = statistics.median(c[side])
            busy, window = c["device_time"][side], c["window"][side]
            share = busy / window
            text = (f"    {label}: {wall * 1e3:.3g} ms a call; the GPU was busy "
                    f"{busy * 1e3:.3g} ms of it ({share:.0%})")
            if "kernels" in c:
                text += (f", {c['kernels'][side]} GPU records in a profiled pass of "
                         f"{c['profiled'][side] * 1e3:.3g} ms a call")
            work = c.get("work") or {}
            limit = c.get("calibrated") or limits.get(work.get("limit"))
            amount = work.get("flops", work.get("bytes"))
            if amount and limit:
                per = "FLOP/s" if "flops" in work else "B/s"
                text += (f", {amount / wall:.3g} {per} = {amount / wall / limit:.0%}"
                         f" of this GPU's {work['limit']}")
            print(text)
        if c.get("bound") == "host":
            if c["name"] in counted:
                print("    host-bound: the GPU idled; it counts (the claim is about "
                      "the host)")
            else:
                print("    host-bound: the GPU idled; this point does not decide a "
                      "claim about GPU work")
    for name, value in decision["facts"].items():
        print(f"{name}: {value}")
    print(f"Verdict on {decision['device'].upper()}: {decision['verdict']}")
    if decision.get("why"):
        print(f"Why: {decision['why']}")
    print(f"Rule: {rule}")


def plot_ratios(series, *, xlabel, title,
                ylabel="anti-pattern time / recommended time"):
    """Median ratio and interval against size, one line per ``{label: [comparison]}``.

    A log-scaled size axis ticked at the sizes measured (as many as fit, written as
    numbers), ratios written ``1.2x``, a dotted line at 1.0 (no difference) and a
    dashed line at the rule's threshold, in colours that survive colour-blindness
    (Okabe-Ito). Text is 10 points on a figure 5.6 inches wide: a phone shows it about
    9 pixels tall. The title's second line names the device, threads and torch version.
    """
    import math

    import matplotlib.pyplot as plt
    import torch
    from matplotlib.ticker import FuncFormatter, NullLocator

    colours = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]
    fig, ax = plt.subplots(figsize=(5.6, 3.6), layout="constrained")
    every = [c for comparisons in series.values() for c in comparisons]
    for (label, comparisons), colour in zip(series.items(), colours):
        points = sorted((c["x"], c["median"], c["low"], c["high"]) for c in comparisons)
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        err = [[p[1] - p[2] for p in points], [p[3] - p[1] for p in points]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=colour, label=label)
    ax.axhline(1.0, color="0.4", linestyle=":", linewidth=1, label="1.0: no difference")
    for t in sorted({c["threshold"] for c in every} - {1.0}):
        ax.axhline(t, color="0.2", linestyle="--", linewidth=1,
                   label=f"threshold {t:g}")
    devices = ", ".join(sorted({c["device"].upper() for c in every}))
    threads = sorted({c["threads"] for c in every})
    said = "/".join(map(str, threads)) + (" thread" if threads == [1] else " threads")
    ax.set_xscale("log")
    sizes = sorted({c["x"] for c in every})
    if sizes and sizes[0] >= 1e-3:  # ticks at sizes, none closer than 1/7 of the axis
        gap = math.log10(sizes[-1] / sizes[0]) / 7
        ticks = [sizes[0]]
        for x in sizes[1:]:
            if math.log10(x / ticks[-1]) >= gap:
                ticks.append(x)
        if ticks[-1] != sizes[-1]:
            ticks[-1] = sizes[-1]
            if len(ticks) > 1 and math.log10(ticks[-1] / ticks[-2]) < gap:
                ticks.pop(-2)

        def size(x):
            if x >= 1e6:
                return f"{x / 1e6:.3g}M"
            if x >= 1e4:
                return f"{x / 1e3:.3g}k"
            return f"{int(x):,}" if float(x).is_integer() else f"{x:.3g}"

        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(ticks, [size(x) for x in ticks])
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\n{devices}, {said}, torch {torch.__version__}", fontsize=10)
    ax.legend(fontsize=10, framealpha=0.9)
    return fig


def plot_series(series, *, xlabel, ylabel, title, device, logx=False):
    """Measured values against steps or size, one line per ``{label: (xs, ys)}``.

    Measured on ``device``; the title's second line names it, the thread count and the
    torch version. Text is 10 points on a figure 5.6 inches wide, as in plot_ratios;
    a log-scaled size axis is ticked at the sizes, written as numbers.
    """
    import matplotlib.pyplot as plt
    import torch
    from matplotlib.ticker import NullLocator

    colours = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]
    markers = ["o", "s", "^", "D", "v", "P"]
    fig, ax = plt.subplots(figsize=(5.6, 3.6), layout="constrained")
    for (label, (xs, ys)), colour, marker in zip(series.items(), colours, markers):
        ax.plot(xs, ys, marker=marker, color=colour, label=label)
    sizes = sorted({x for xs, _ in series.values() for x in xs})
    if logx:
        ax.set_xscale("log")
        if sizes and sizes[0] >= 1e-3 and len(sizes) <= 8:
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xticks(sizes, [f"{x:,.0f}" if float(x).is_integer() else f"{x:.3g}"
                                  for x in sizes])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    n = torch.get_num_threads()
    where = f"{torch.device(device).type.upper()}, {n} thread{'' if n == 1 else 's'}"
    ax.set_title(f"{title}\n{where}, torch {torch.__version__}", fontsize=10)
    ax.legend(fontsize=10, framealpha=0.9)
    return fig


def cpu_ticks():
    """CPU clock ticks: the machine's busy and total; this process's and its children's.

    Linux only (``/proc``); None elsewhere. Two readings bracket a measurement, and
    others_cores turns them into the CPU that other processes took meanwhile.
    """
    import os

    try:
        with open("/proc/stat") as fh:
            fields = [int(v) for v in fh.readline().split()[1:9]]
        own = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    stat = fh.read().rsplit(")", 1)[1].split()  # after the name
            except OSError:
                continue  # ended meanwhile
            if int(pid) == os.getpid() or int(stat[1]) == os.getpid():
                own += int(stat[11]) + int(stat[12])  # utime + stime
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields), own


def others_cores(spans):
    """Cores' worth of CPU that other processes used in ``[(before, after), ...]``
    of cpu_ticks readings; None where a reading is missing."""
    import os

    if not spans or any(t is None for span in spans for t in span):
        return None
    busy = total = own = 0
    for before, after in spans:
        busy += after[0] - before[0]
        total += after[1] - before[1]
        own += after[2] - before[2]
    return round(max(busy - own, 0) / max(total / os.cpu_count(), 1), 2)


def cores_were_free(spans, cores, limit=0.25):
    """``(others, free)``: the most cores' worth of CPU other processes used during
    any one of ``spans`` (one ``(before, after)`` pair of cpu_ticks readings per
    point timed), and whether that stayed below ``limit`` on a machine of two or
    more cores. ``(None, None)`` where a reading is missing."""
    loads = [others_cores([span]) for span in spans]
    others = None if not loads or None in loads else max(loads)
    return others, None if others is None or cores < 2 else others < limit


def check_plausible(comparison, *, at_most, because):
    """``comparison``, if the resources could give its ratio: a speed-up whose whole
    interval lies above ``at_most`` (the most that ``because`` allows, e.g. the
    ratio of cores or processes, or of bandwidths) measured a defect (oversubscribed
    threads, contention, a variant that skipped work), not the pattern, and fails
    the tip with the reason. A comparison whose cores were not free, or that does
    not say (no ``cores`` reading), is left alone: contention may explain it, and
    such a comparison decides nothing and is not published."""
    cores = comparison.get("cores")
    if cores is not None and cores.get("free") is not False and \
            comparison["low"] > at_most:
        raise RuntimeError(
            f"{comparison['name']}: {comparison['median']:.3g}x "
            f"[{comparison['low']:.3g}-{comparison['high']:.3g}] is more than the "
            f"{at_most:.3g}x that {because} allows: a measurement defect, "
            f"not an effect")
    return comparison


class Peer:
    """A fresh Python process that runs this script's functions when asked.

    ``Peer(start, *args, env=...)`` starts it and calls ``start(*args)`` there;
    what that returns stays there as the peer's state. ``call(fn, *args)`` runs
    ``fn(state, *args)`` there and gives its answer (arguments and answers travel
    as JSON). ``fn`` is an ordinary function of the script: its source, and that of
    the functions, imports and constants it uses, is sent over the first time
    (read with ``inspect``, so it must be defined in a file or a notebook cell).
    ``env`` is added to this process's environment, or with ``inherit=False`` is
    the whole of it. A peer that exits, or takes more than ``timeout_s`` to
    answer, raises RuntimeError with the end of its error output.
    """

    SERVE = """
import json, os, sys

# Only answers go to the real stdout. Anything else written there, by Python or
# by C++ code (gloo prints "[Gloo] Rank 1 is connected to ..." on some
# releases), goes to stderr.
answer = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
space, state = {"__name__": "__peer__"}, None
for number, line in enumerate(sys.stdin):
    code, name, args = json.loads(line)
    if name is None:
        break
    exec(code, space)
    if number == 0:
        state, result = space[name](*args), "ready"
    else:
        result = space[name](state, *args)
    print(json.dumps(result), file=answer, flush=True)
sys.stderr.flush()
os._exit(0)  # at once: a process group's threads can hold up an interpreter's exit
"""

    def __init__(self, start, *args, env=None, timeout_s=120, inherit=True,
                 wait=True):
        import os
        import subprocess
        import sys
        import tempfile
        import threading

        self.err = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([sys.executable, "-c", self.SERVE],
                                     env={**os.environ, **(env or {})} if inherit
                                     else env, text=True, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err)
        self.timeout_s, self.deadline = timeout_s, float("inf")
        threading.Thread(target=self.watch, daemon=True).start()
        self.sent = set()
        self.send(start, *args)  # answered "ready" once started
        if wait and self.receive() != "ready":
            self.fail()

    def source(self, fn):
        """The source of ``fn`` (a function or class of this script), after that of
        the functions, classes, imports and constants it uses not sent yet."""
        import ast
        import dis
        import inspect
        import linecache
        import types

        self.sent.add(fn.__name__)
        parts = [fn] if inspect.isfunction(fn) else [
            f for f in vars(fn).values() if inspect.isfunction(f)]
        if not parts:
            raise TypeError(f"{fn.__name__}: only functions, and classes with methods, "
                            "can be sent to another process as code")
        space, code = parts[0].__globals__, parts[0].__code__
        names, todo = [], [f.__code__ for f in parts]
        if inspect.isfunction(fn):
            text = inspect.getsource(fn)
        else:  # its statement in the file (inspect needs a __file__ for a class,
            # which a page run by sphinx-gallery lacks), and the names it reads
            lines = linecache.getlines(code.co_filename)
            node = next(n for n in ast.parse("".join(lines)).body
                        if isinstance(n, ast.ClassDef) and n.name == fn.__name__
                        and n.lineno <= code.co_firstlineno <= n.end_lineno)
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            text = "".join(lines[first - 1:node.end_lineno])
            heads = node.bases + node.keywords + node.decorator_list
            names += [n.id for h in heads for n in ast.walk(h)
                      if isinstance(n, ast.Name)]
        while todo:  # the globals its functions, and the functions inside them, read
            c = todo.pop()
            names += [i.argval for i in dis.get_instructions(c)
                      if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
            todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
        before = []
        for name in dict.fromkeys(names):
            if name in self.sent or name not in space:
                continue  # sent, or a builtin
            self.sent.add(name)
            value = space[name]
            here = getattr(value, "__module__", None) == fn.__module__
            if isinstance(value, types.ModuleType):
                before.append(f"import {value.__name__} as {name}")
            elif (inspect.isfunction(value) or inspect.isclass(value)) and here:
                before.append(self.source(value))
            elif callable(value) and getattr(value, "__module__", None):
                before.append(f"from {value.__module__} import "
                              f"{value.__qualname__} as {name}")
            else:
                try:
                    assert ast.literal_eval(repr(value)) == value
                except (AssertionError, ValueError, SyntaxError):
                    raise TypeError(f"{fn.__name__} uses {name}, which cannot be sent "
                                    f"to another process as code") from None
                before.append(f"{name} = {value!r}")
        return "\n".join(before + [text])

    def send(self, fn, *args):
        import json
        import textwrap

        code = "" if fn is None or fn.__name__ in self.sent else self.source(fn)
        try:
            self.proc.stdin.write(json.dumps([textwrap.dedent(code), fn and
                                              fn.__name__, args]) + "\n")
            self.proc.stdin.flush()
        except OSError:
            self.fail()

    def watch(self):
        """Kill the peer once it has kept this process waiting ``timeout_s``."""
        import time

        while self.proc.poll() is None:
            time.sleep(0.5)
            if time.monotonic() > self.deadline:
                self.proc.kill()

    def receive(self):
        import json
        import time

        self.deadline = time.monotonic() + self.timeout_s
        line = self.proc.stdout.readline()
        self.deadline = float("inf")
        if not line:
            self.fail()
        return json.loads(line)

    def call(self, fn, *args):
        self.send(fn, *args)
        return self.receive()

    def fail(self):
        self.proc.kill()
        self.proc.wait()
        self.err.seek(0)
        raise RuntimeError(f"the other process stopped (exit {self.proc.returncode}):\n"
                           + self.err.read()[-3000:])

    def close(self):
        import subprocess

        self.send(None)
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.fail()
        self.err.close()


def free_port():
    """A free TCP port on 127.0.0.1, for a process group's rendezvous."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TwoRanks:
    """Two ranks: rank 0 in this process, rank 1 in a fresh one (a Peer).

    ``join(rank, *args)`` is an ordinary function of the script that joins the
    process group and returns the rank's state (rank 0's: ``self.me``); each
    rank runs it, rank 1 with ``env`` added to its environment (a fresh
    interpreter, not a fork: forking a process whose OpenMP threads run can
    hang). ``both(fn, *args)`` runs ``fn(state, *args)`` on both ranks at once
    and gives both answers; ``on_rank_1`` runs it on rank 1 alone. ``close()``
    runs ``leave`` (if given) on both, then ends rank 1.
    """

    def __init__(self, join, *args, env=None, leave=None):
        self.leave = leave
        self.peer = Peer(join, 1, *args, env=env, wait=False)
        self.me = join(0, *args)  # waits for rank 1 to join
        if self.peer.receive() != "ready":
            self.peer.fail()

    def both(self, fn, *args):
        self.peer.send(fn, *args)
        mine = fn(self.me, *args)
        return mine, self.peer.receive()

    def on_rank_1(self, fn, *args):
        return self.peer.call(fn, *args)

    def close(self):
        if self.leave is not None:
            self.both(self.leave)
        self.peer.close()


# --- used by the build only (never copied into a tip) ------------------------------------------

BUSY_MIN = 0.5  # compare_times: a point is device-bound when the GPU was busy this share of it
GROUP_CONDITIONS = tuple(f"{q} {side}" for q in ("all", "any", "none")
                         for side in ("above", "below", "noise"))


def rederive(decision):
    """The verdict the recorded evidence gives, recomputed from the raw samples.

    Each comparison's ratios are recomputed from its samples, its interval and outcome from
    the ratios, its bound from its busy shares and whether its cores were free from what it
    recorded of them; then the verdict by the one rule (:func:`judge`) with the decision's own
    ``settle`` (0 for records made before it existed, as their rule was).
    Returns ``(verdict, problems)``: ``problems`` names every recorded figure or outcome that
    the samples do not give, and a verdict that differs from the one the evidence gives.
    """
    problems = []
    recomputed = {}
    for c in decision["comparisons"]:
        if c["measure"] == "ratio":
            ratios = [b / v for b, v in zip(c["base"], c["cand"])]
        else:
            ratios = [b - v for b, v in zip(c["base"], c["cand"])]
        if any(abs(r - s) > 1e-9 * max(1.0, abs(r)) for r, s in zip(ratios, c["ratios"])):
            problems.append(f"comparison {c['name']!r}: its ratios are not its samples' ratios")
        recorded = (c["median"], c["low"], c["high"])
        if any(abs(a - b) > 1e-9 * max(1.0, abs(a)) for a, b in zip(median_interval(ratios), recorded)):
            problems.append(f"comparison {c['name']!r}: median or interval differs from its samples")
        _, low, high = median_interval(ratios)
        mine = {**c, "low": low, "high": high, "outcome": outcome(low, high, c["threshold"])}
        if mine["outcome"] != c["outcome"]:
            problems.append(f"comparison {c['name']!r}: outcome {c['outcome']!r} is not what its "
                            f"interval gives ({mine['outcome']!r})")
        if "device_time" in c or "bound" in c:
            shares = [c["device_time"][k] / c["window"][k] for k in ("base", "cand")]
            if any(not 0 <= share <= 1 + 1e-9 for share in shares):
                problems.append(f"comparison {c['name']!r}: GPU time exceeds its wall time")
            mine["bound"] = "device" if min(shares) >= BUSY_MIN else "host"
            if c.get("bound") != mine["bound"]:
                problems.append(f"comparison {c['name']!r}: bound {c.get('bound')!r} is not what its "
                                f"busy shares give ({mine['bound']!r})")
        if "kernels" in c and not all(c["kernels"].get(k) for k in ("base", "cand")):
            problems.append(f"comparison {c['name']!r}: the profiler recorded no GPU activity "
                            "for a variant (a blind profiler decides nothing)")
        free = cores_free(c.get("cores"))
        if free is not None and free != c["cores"].get("free"):
            problems.append(f"comparison {c['name']!r}: cores free {c['cores'].get('free')!r} is not "
                            f"what its others and needed cores give ({free!r})")
        recomputed[c["name"]] = mine
    groups = {}
    for name, members in decision["groups"].items():
        if name in decision["facts"]:
            problems.append(f"{name!r} is both a fact and a group")
        missing = [m for m in members if m not in recomputed]
        if missing or not members:
            problems.append(f"group {name!r} names no comparison, or unknown ones: {missing}")
            continue
        groups[name] = [recomputed[m] for m in members]
    try:
        found = judge(decision["device"], decision["cases"], groups, decision["facts"],
                      decision.get("about"), decision.get("settle", 0.0))
    except ValueError as exc:
        return None, [*problems, str(exc)]
    verdict = found["verdict"]
    if verdict is None:
        problems.append("no case matched the recorded evidence")
    elif verdict != decision["verdict"]:
        problems.append(f"the verdict is {decision['verdict']!r} but the recorded evidence "
                        f"gives {verdict!r}")
    return verdict, problems


def cores_free(cores):
    """Whether a timing's recorded ``cores`` were free, by compare_times' rule: the others
    used less than the machine's cores beyond those needed, plus a quarter core. None where
    the record cannot say (no reading, or a record made before it had the machine's count)."""
    if not isinstance(cores, dict) or cores.get("others") is None or "machine" not in cores:
        return None
    return cores["others"] < cores["machine"] - min(cores["needed"], cores["machine"]) + 0.25


def deciding_comparisons(decision):
    """The comparisons of a recorded decision that its verdict counted (:func:`judge`): on a
    GPU, for a claim about GPU work, not the host-bound ones; [] when it cannot be read."""
    by_name = {c["name"]: c for c in decision.get("comparisons") or []}
    groups = {n: [by_name[m] for m in ms if m in by_name]
              for n, ms in (decision.get("groups") or {}).items()}
    try:
        found = judge(decision.get("device", "cpu"), decision.get("cases") or [], groups,
                      decision.get("facts"), decision.get("about"))
    except (ValueError, KeyError, TypeError):
        return []
    counted = {c["name"] for cs in found["deciding"].values() for c in cs}
    grouped = {m for ms in (decision.get("groups") or {}).values() for m in ms}
    return [c for c in decision.get("comparisons") or []
            if c["name"] in counted or c["name"] not in grouped]

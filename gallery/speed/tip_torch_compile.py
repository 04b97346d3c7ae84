"""
``torch.compile`` fuses pointwise ops: where it pays
====================================================

The seed articles never mention ``torch.compile``. PyTorch's *Performance Tuning Guide*
recommends it for chains of pointwise operations ("Fuse operations"):

    "Pointwise operations such as elementwise addition, multiplication, and math
    functions like `sin()`, `cos()`, `sigmoid()`, etc., can be combined into a
    single kernel. This fusion helps reduce memory access and kernel launch times."

    "In the simplest case fusion can be enabled by applying
    `torch.compile` decorator to the function definition"

The guide's own example is a hand-written GELU. Eager mode runs its five ops as five passes
over memory; Inductor generates one C++ (on CPU) or Triton (on CUDA) loop. Two costs come
with it: a one-off compile, and a per-call overhead (checking that the compiled code still
applies) that eager mode does not have. On a small tensor that overhead can outweigh the
saving; on a large one the saved memory passes dominate. This tip measures the compile once
and the steady-state speed across tensor sizes, to show where compiling pays.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["compile"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "torch.compile's fused loop wins on large pointwise chains; on small tensors its per-call overhead can lose, and the first call compiles for seconds."
# sphinx_gallery_tips_statement = "Pointwise operations can be combined into a single kernel by applying torch.compile; this fusion helps reduce memory access and kernel launch times."
# sphinx_gallery_tips_keywords = ["torch.compile", "inductor", "kernel fusion", "pointwise", "compile time", "gelu"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html"]

# %%
# How this tip measures and decides
# ---------------------------------
# The same helpers in every tip of this site (a test keeps the copies identical). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, anti-pattern time / recommended time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
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

def compare_times(name, variants, *, threshold, device, x=None, min_rounds=6,
                  max_rounds=40, budget_s=2.0, round_s=0.02):
    """Time ``{"anti-pattern": f, "recommended": g}`` in alternating rounds.

    Each variant gets a ``torch.utils.benchmark`` timer (which synchronises CUDA around
    the timed calls) and as many calls per round as fit in about ``round_s`` seconds. In
    each round both run, each first in every other round; the ratio per round is
    anti-pattern time / recommended time. Rounds are added while the interval straddles
    ``threshold``, up to ``max_rounds`` or ``budget_s`` seconds.
    """
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
    base, cand, ratios = [], [], []
    start = time.perf_counter()
    while len(ratios) < max_rounds:
        order = [base_name, cand_name]
        if len(ratios) % 2:
            order.reverse()
        seconds = {label: timers[label].timeit(calls[label]).median for label in order}
        base.append(seconds[base_name])
        cand.append(seconds[cand_name])
        ratios.append(base[-1] / cand[-1])
        if len(ratios) >= min_rounds:
            _, low, high = median_interval(ratios)
            spent = time.perf_counter() - start
            if outcome(low, high, threshold) != "noise" or spent > budget_s:
                break
    mid, low, high = median_interval(ratios)
    return {"name": name, "device": torch.device(device).type,
            "threads": torch.get_num_threads(), "x": x, "metric": "time", "unit": "s",
            "measure": "ratio", "baseline": base_name, "candidate": cand_name,
            "base": base, "cand": cand, "ratios": ratios, "median": mid, "low": low,
            "high": high, "threshold": threshold,
            "outcome": outcome(low, high, threshold)}

def decide(device, cases, *, groups=None, facts=None, key=None):
    """The verdict on ``device``: the first of ``cases`` whose conditions all hold.

    ``groups`` maps a name to a list of comparisons, ``facts`` a name to an observation
    (a bool, number or string measured on ``device``). A case is
    ``(verdict, {name: condition})``. A fact's condition is a value or a list of
    accepted values; a group's is ``"all above"``, ``"any above"``, ``"none above"``
    (or ``below``, ``noise``), or a list of them. The last case has no conditions.
    ``key`` is the comparison, or a ``{"name", "value", "unit"}`` dict, shown as the
    key figure.
    """
    import torch

    def holds(state, condition):
        if isinstance(state, list):  # a group: the outcomes of its comparisons
            quantifier, side = condition.split()
            hits = [o == side for o in state]
            quantified = {"all": all(hits), "any": any(hits), "none": not any(hits)}
            return quantified[quantifier]
        return state == condition

    groups, facts = dict(groups or {}), dict(facts or {})
    state = {**facts, **{n: [c["outcome"] for c in cs] for n, cs in groups.items()}}
    def matches(conditions):
        return all(any(holds(state[n], v) for v in (c if isinstance(c, list) else [c]))
                   for n, c in conditions.items())

    verdict = next((case for case, conditions in cases if matches(conditions)), None)
    if verdict is None:
        raise ValueError("no case matched: end with a case that has no conditions")
    if key is not None and "ratios" in key:
        unit = "x" if key["measure"] == "ratio" else key["unit"]
        key = {"name": key["name"], "value": key["median"], "low": key["low"],
               "high": key["high"], "unit": unit, "rounds": len(key["ratios"])}
    comparisons = list({c["name"]: c for cs in groups.values() for c in cs}.values())
    threads = {c["threads"] for c in comparisons} or {torch.get_num_threads()}
    members = {n: [c["name"] for c in cs] for n, cs in groups.items()}
    return {"device": torch.device(device).type, "verdict": verdict, "cases": cases,
            "facts": facts, "groups": members, "comparisons": comparisons,
            "state": state, "key": key, "threads": sorted(threads)}

def report(decision, rule):
    """Print each comparison and fact, then the verdict and its rule."""
    for c in decision["comparisons"]:
        unit = "x" if c["measure"] == "ratio" else f" {c['unit']}"
        print(f"{c['name']}: {c['median']:.3g}{unit} "
              f"[{c['low']:.3g} .. {c['high']:.3g}], {len(c['ratios'])} rounds, "
              f"{c['outcome']} {c['threshold']:.3g}")
    for name, value in decision["facts"].items():
        print(f"{name}: {value}")
    print(f"Verdict on {decision['device'].upper()}: {decision['verdict']}")
    print(f"Rule: {rule}")

def plot_ratios(series, *, xlabel, title,
                ylabel="anti-pattern time / recommended time"):
    """Median ratio and interval against size, one line per ``{label: [comparison]}``.

    A log-scaled size axis, a dotted line at 1.0 (no difference) and a dashed line at
    the rule's threshold, in colours that survive colour-blindness (Okabe-Ito). The
    title's second line names the device, thread count and torch version.
    """
    import matplotlib.pyplot as plt
    import torch

    colours = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]
    fig, ax = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
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
    threads = "/".join(str(t) for t in sorted({c["threads"] for c in every}))
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\n{devices}, {threads} thread(s), torch {torch.__version__}",
                 fontsize=10)
    ax.legend(fontsize=8)
    return fig


# %%
# Setup
# -----
# On CUDA when there is one, else on the CPU. One CPU thread: the question is fusion, not
# parallelism, and one thread keeps timings steady on a busy machine.
import statistics
import textwrap
import timeit

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

# Tensor sizes (float32 elements) from a few KiB, where per-call overhead is all there
# is, to tens of MiB, where memory traffic dominates. A GPU moves memory far faster, so
# its sweep reaches larger tensors.
sizes = {"cpu": [1 << 12, 1 << 16, 1 << 20, 1 << 22],
         "cuda": [1 << 12, 1 << 16, 1 << 20, 1 << 24]}[device.type]


def sync():
    if device.type == "cuda":
        torch.cuda.synchronize()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The same Python function, run eagerly (one kernel per op) and compiled (one fused kernel).
# ``dynamic=True`` compiles one kernel for every tensor length, so the sweep below compiles
# once instead of once per size.
def gelu(x):
    return x * 0.5 * (1.0 + torch.erf(x / 1.41421))


gelu_compiled = torch.compile(gelu, dynamic=True)

# %%
# Compile time, measured once
# ---------------------------
# The first call traces, compiles and runs (making ``gelu_compiled`` above already imported
# the compiler, which takes seconds too). ``torch.utils.benchmark`` warms a statement up
# before timing it, and that warm-up *is* the compile here, so this one call is timed with
# the standard library's ``timeit`` (one run). Inductor caches compiled code on disk, so a
# second run of this script compiles faster than the first.
x = torch.randn(sizes[0], device=device)  # [elements]
compile_error = None
try:
    compile_s = timeit.timeit(lambda: (gelu_compiled(x), sync()), number=1)
    print(f"first call (trace, compile, run): {compile_s:.2f} s")
except Exception as err:  # no C++ compiler, no Triton for this GPU, ...
    compile_error = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
    compile_s = None
    print(textwrap.fill(f"torch.compile failed on this machine: {compile_error}", 88))

# %%
# Check: same numbers
# -------------------
# Fusion changes no formula, but the generated code may vectorise ``erf`` differently: a
# float32 tolerance is the honest comparison.
if compile_error is None:
    for n in (sizes[0], sizes[-1]):
        x = torch.randn(n, device=device)  # [elements]
        torch.testing.assert_close(gelu_compiled(x), gelu(x))
    print(f"compiled matches eager at {sizes[0]:,} and {sizes[-1]:,} elements")

# %%
# Measurement
# -----------
# Speed-up = eager time / compiled time at each size. The two smallest sizes ask "is compiled
# at most 10% slower than eager where little but overhead counts?" (threshold 0.9); the
# larger ones ask "does compiling gain more than 10%?" (threshold 1.10).
speedups, measurements, skipped = [], [], []
if compile_error is None:
    for n in sizes:
        x = torch.randn(n, device=device)  # [elements]
        speedups.append(compare_times(
            f"speed-up at {n:,} elements",
            {"eager": lambda: gelu(x), "compiled": lambda: gelu_compiled(x)},
            threshold=0.9 if n in sizes[:2] else 1.10, device=device, x=n,
            budget_s=1.5))
    large = speedups[-1]
    eager_s = statistics.median(large["base"])
    compiled_s = statistics.median(large["cand"])
    saved_s = eager_s - compiled_s
    print(f"at {sizes[-1]:,} elements: eager {eager_s * 1e6:,.0f} us, "
          f"compiled {compiled_s * 1e6:,.0f} us per call (medians)")
    if saved_s > 0:
        print(f"the {compile_s:.1f} s compile is paid back after "
              f"~{compile_s / saved_s:,.0f} calls of that size")
    measurements.append({"variant": "compiled", "metric": "first call (compile)",
                         "value": compile_s, "unit": "s", "device": device.type})
else:
    skipped.append(f"compiled timing: torch.compile failed here ({compile_error})")

# %%
# Where it pays
# -------------
# The speed-up of the compiled function over eager mode at each tensor size, with its
# interval.
if speedups:
    fig = plot_ratios({"compiled vs eager GELU": speedups},
                      xlabel="tensor size (float32 elements)",
                      ylabel="eager time / compiled time",
                      title="GELU as 5 pointwise ops: eager vs torch.compile")

# %%
# Verdict
# -------
# The guide's advice holds where compiling pays on large tensors (more than 10% faster at the
# largest size) and costs little on small ones (at most 10% slower at the two smallest, and
# measured so). It depends on the size where it pays on large tensors only, and on the
# platform where ``torch.compile`` cannot run. It is wrong if even the largest tensor gains
# less than 10%. An interval inside the noise is no evidence: not a gain at the largest
# size, not a small cost at the small ones.
RULE = ("holds if compiled is >10% faster at the largest size (interval above 1.10) "
        "and at most 10% slower at the two smallest (intervals above 0.9); wrong if "
        "below 1.10 at the largest size; depends otherwise, or if torch.compile fails")
cases = [("depends", {"torch.compile runs here": False}),
         ("holds", {"large tensor": "all above", "small tensors": "all above"}),
         ("wrong", {"large tensor": "all below"}),
         ("depends", {})]
facts = {"torch.compile runs here": compile_error is None}
if speedups:
    groups = {"small tensors": speedups[:2], "in between": speedups[2:-1],
              "large tensor": speedups[-1:]}
    decision = decide(device, cases, groups=groups, facts=facts, key=speedups[-1])
else:
    decision = decide(device, cases, facts=facts)
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": measurements, "skipped": skipped}

# %%
# When not to use it
# ------------------
# Skip it for code that runs a handful of times (scripts, one-off evaluation): the compile
# takes longer than the eager run. Where the figure shows small tensors losing, per-call
# overhead dominates: compile larger regions (a whole model step) rather than one small
# function. With the default ``dynamic=None`` a second input shape costs a second compile
# (after which the shape is treated as dynamic); ``dynamic=True``, as here, compiles for any
# length from the start. This tip times a pointwise chain only: matmuls and convolutions
# already call tuned libraries, so expect less from compiling them.

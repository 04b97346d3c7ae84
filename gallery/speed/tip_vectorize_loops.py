"""
Python loops over a tensor versus one ``torch.max(x, dim=1)``
=============================================================

The article advises against looping over a tensor's rows in Python and recommends a PyTorch
function that works on the whole tensor, e.g. ``torch.max(x, dim=1)`` (claim S3-1):

    "Iteration over a tensor through primitive loops (`for` or `while`) in python is very slow."

The article's example, verbatim::

    x = torch.Tensor([[0, 1, 2, 3],
                      [7, 6, 5, 4]])
    answer = torch.Tensor([3., 7.])

    # Don't
    max_x = torch.empty((2,))
    idx = torch.argmax(x, dim=1)
    for i in range(x.size(0)):
        max_x[i] = x[i, idx[i]]

    # Do
    max_x, _ = torch.max(x, dim=1)

A loop pays Python and dispatcher overhead (microseconds; on a GPU also a kernel launch) for
every row; the vectorised call pays it once. So the gap should grow with the number of rows.
This tip runs the article's code, then its loop generalised to any number of rows, checks that
it equals ``torch.max(x, dim=1).values`` and times both over a sweep of row counts.
"""
# sphinx_gallery_tips_claims = ["S3-1"]
# sphinx_gallery_tips_tags = ["indexing"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.0"
# sphinx_gallery_tips_takeaway = "A Python loop over rows pays per-row overhead; one torch.max(x, dim=1) call is faster from one row up, and the gap grows with rows."
# sphinx_gallery_tips_keywords = ["vectorization", "vectorize", "python loop", "torch.max", "for loop", "row-wise max"]
# sphinx_gallery_tips_rules = ["PTT033"]

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
# On CUDA when there is one, else on the CPU. One CPU thread: the claim is about per-row Python
# overhead, not parallelism, and on a busy machine a two-thread reduction of a few rows can
# stall a whole scheduler slice waiting for its partner.
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

COLS = 64

# %%
# The article's code, as written
# ------------------------------
# On the CPU, as the article runs it.
x = torch.Tensor([[0, 1, 2, 3],
                  [7, 6, 5, 4]])
answer = torch.Tensor([3., 7.])

# Don't
max_x = torch.empty((2,))
idx = torch.argmax(x, dim=1)
for i in range(x.size(0)):
    max_x[i] = x[i, idx[i]]
loop_answer = max_x.clone()

# Do
max_x, _ = torch.max(x, dim=1)

assert torch.equal(loop_answer, answer) and torch.equal(max_x, answer)
print("article's loop:", loop_answer.tolist(), "| torch.max:", max_x.tolist(),
      "| answer:", answer.tolist())

# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The article's "Don't" loop for any number of rows: per row two indexing ops and one element
# write, each a separate dispatch from Python.


def row_max_loop(x):
    max_x = torch.empty((x.size(0),), device=x.device)  # [rows]
    idx = torch.argmax(x, dim=1)                         # [rows]
    for i in range(x.size(0)):
        max_x[i] = x[i, idx[i]]
    return max_x


def row_max_vectorised(x):
    return torch.max(x, dim=1).values  # [rows]: one call for all rows


# %%
# Check: same result
# ------------------
x = torch.randn(100, COLS, device=device)  # [rows, cols]
torch.testing.assert_close(row_max_loop(x), row_max_vectorised(x), rtol=0, atol=0)
print("loop == torch.max(x, dim=1).values on 100 rows: identical")

# %%
# Measurement
# -----------
# Row counts from one (the loop body runs once) to hundreds. On a GPU every loop iteration also
# launches kernels, so the same row counts already show the effect there; the largest is kept
# moderate because the loop's time grows with it.
row_counts = {"cpu": [1, 8, 64, 512], "cuda": [1, 8, 64, 256]}[device.type]
speedups = []
for rows in row_counts:
    x = torch.randn(rows, COLS, device=device)  # [rows, COLS]
    speedups.append(compare_times(
        f"speed-up at {rows} rows",
        {"loop": lambda: row_max_loop(x),
         "torch.max(dim=1)": lambda: row_max_vectorised(x)},
        threshold=2.0, device=device, x=rows))

# %%
# Where it pays
# -------------
# The speed-up of ``torch.max(x, dim=1)`` over the loop at each row count, with its interval,
# on logarithmic axes: the speed-ups span orders of magnitude.
fig = plot_ratios({"torch.max(x, dim=1) vs loop": speedups},
                  xlabel=f"rows (each {COLS} columns)",
                  ylabel="loop time / torch.max time",
                  title="row-wise max: Python loop vs one call")
fig.axes[0].set_yscale("log")

# %%
# Verdict
# -------
# "Very slow" is a strong word: the loop is very slow at a row count where the vectorised call
# is at least 2x faster (interval above 2.0). At one row there is nothing to iterate over, so
# that point is shown but does not decide.
RULE = ("holds if torch.max(x, dim=1) is at least 2x faster than the loop at every row "
        "count above 1 (interval above 2.0); wrong if at none; depends otherwise")
decision = decide(device, [("holds", {"more than one row": "all above"}),
                           ("wrong", {"more than one row": "none above"}),
                           ("depends", {})],
                  groups={"more than one row": speedups[1:], "one row": speedups[:1]},
                  key=speedups[2])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# A loop is fine when each step depends on the previous one (a recurrence) and there is no
# scan-style op for it, or when it runs over a handful of large chunks rather than many rows:
# then the per-iteration overhead is small next to each chunk's work.

"""
``inference_mode()`` versus ``no_grad()``
=========================================

The article says ``torch.inference_mode()`` beats ``torch.no_grad()`` by 5-10%, and more as
models grow (claim S0-5):

    "no_grad() mode contains additional heads, like version_counting and view tracking of
    tensors, that increase the computation head by 5-10%."

Both modes switch off graph recording. ``inference_mode`` also skips version counters and view
metadata on the tensors it creates. That saving is a fixed cost per tensor, not per FLOP, so it
should show where ops are tiny and vanish as they grow: the opposite of "more as models grow".
This tip measures it across model widths, from ops that take a microsecond to ops that take
milliseconds.
"""
# sphinx_gallery_tips_claims = ["S0-5"]
# sphinx_gallery_tips_tags = ["autograd", "inference"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "inference_mode saves a fixed cost per op: visible on tiny ops, lost in the noise on large ones."
# sphinx_gallery_tips_keywords = ["inference_mode", "no_grad", "torch.inference_mode", "evaluation speed"]

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
    for verdict, conditions in cases:
        if all(any(holds(state[n], v) for v in (c if isinstance(c, list) else [c]))
               for n, c in conditions.items()):
            break
    else:
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
# An 8-layer MLP per width, on CUDA when there is one, else on the CPU. One CPU thread: the
# claim is about per-tensor bookkeeping, not parallelism, and one thread keeps small ops from
# stalling on a busy machine.
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")


def make_model(width, depth=8):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).to(device).eval()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
def predict_no_grad(model, x):
    with torch.no_grad():
        return model(x)


def predict_inference_mode(model, x):
    with torch.inference_mode():
        return model(x)


# %%
# Check: same numbers, one real difference
# ----------------------------------------
# Both give identical outputs. The difference is what you may do with the result afterwards:
# a tensor made under ``inference_mode`` cannot be saved for backward later.
model = make_model(64)
x = torch.randn(32, 64, device=device)  # [batch, features]
a, b = predict_no_grad(model, x), predict_inference_mode(model, x)
torch.testing.assert_close(a, b, rtol=0, atol=0)
print("outputs identical:", torch.equal(a, b))
print("is_inference():   no_grad ->", a.is_inference(), "| inference_mode ->", b.is_inference())

w = torch.ones(64, device=device, requires_grad=True)
try:
    (b * w).sum().backward()
except RuntimeError as err:
    print("using the inference tensor in autograd raises:", str(err).splitlines()[0])
else:
    raise AssertionError("expected a RuntimeError for an inference tensor saved for backward")

# %%
# Measurement
# -----------
# Widths from tiny (each op costs about as much as the bookkeeping around it) to large (each op
# is real arithmetic). A GPU needs far larger ops before the arithmetic dominates. Batch 16.
widths = {"cpu": [4, 32, 256, 2048], "cuda": [16, 256, 4096, 16384]}[device.type]
speedups = []
for width in widths:
    model = make_model(width)
    x = torch.randn(16, width, device=device)  # [batch, features]
    speedups.append(compare_times(
        f"speed-up at width {width}",
        {"no_grad": lambda: predict_no_grad(model, x),
         "inference_mode": lambda: predict_inference_mode(model, x)},
        threshold=1.05, device=device, x=width))

# %%
# Where it pays
# -------------
# The speed-up of ``inference_mode`` over ``no_grad`` at each width, with its interval.
fig = plot_ratios({"inference_mode vs no_grad": speedups}, xlabel="model width (features)",
                  title="8-layer MLP forward, batch 16")

# %%
# Verdict
# -------
# The claim promises at least 5% at every size. A width *gains* when the interval of its
# speed-up lies above 1.05; inside the noise or below counts as no 5% gain.
RULE = ("holds if inference_mode is >5% faster at every width (interval above 1.05); wrong if at "
        "no width; depends otherwise")
decision = decide(device, [("holds", {"speed-up": "all above"}),
                           ("wrong", {"speed-up": "none above"}),
                           ("depends", {})],
                  groups={"speed-up": speedups}, key=speedups[0])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [], "skipped": []}

# %%
# When not to use it
# ------------------
# Use ``inference_mode`` for pure inference. Keep ``no_grad`` when the outputs may later meet
# autograd (e.g. targets computed from a frozen model during training, or tensors you modify in
# place and then differentiate): inference tensors raise an error there, as shown above.

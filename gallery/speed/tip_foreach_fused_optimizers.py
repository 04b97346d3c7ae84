"""
Optimizer implementations: for-loop, ``foreach=True`` and ``fused=True``
========================================================================

The seed articles never mention how an optimizer runs its update. The ``torch.optim``
documentation ("Algorithms") ranks its three implementations:

    "In general, the performance ordering of the 3 implementations is fused > foreach >
    for-loop. So when applicable, we default to foreach over for-loop."

The default is chosen per device: ``Adam``'s docstring says it tries foreach "on CUDA, since
it is usually significantly more performant", so on the CPU an optimizer built without flags
runs the for-loop. ``fused=True`` on the CPU arrived in torch 2.4 (marked *beta* in the docs'
stability table); older releases refuse it there, so this tip first checks that the fused
implementation runs on this device before timing it. It then times one ``Adam.step()`` with
each implementation as the same number of weights is split into more and more tensors, since
the for-loop pays a fixed cost per tensor.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["optimizer", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "foreach Adam saves per-tensor overhead, so it can pay only with many parameter tensors; fused=True (CPU: torch 2.4+) fuses the whole update. See the figure."
# sphinx_gallery_tips_statement = "In general, the performance ordering of the 3 implementations is fused > foreach > for-loop."
# sphinx_gallery_tips_keywords = ["torch.optim.Adam", "foreach", "fused", "multi-tensor", "optimizer.step", "_foreach"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/optim.html"]
# sphinx_gallery_tips_rules = ["PTT031"]

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
# A fixed number of weights (64 Ki floats on the CPU, 4 Mi on a GPU, which needs far more
# work per kernel before launch overheads stop dominating), split into 1 to a few hundred
# tensors. One CPU thread: the question is per-tensor overhead, not parallelism.
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")
total = {"cpu": 2**16, "cuda": 2**22}[device.type]
counts = {"cpu": [1, 4, 32, 256], "cuda": [1, 8, 64, 512]}[device.type]


def make_params(n):
    """``n`` parameters holding ``total`` weights between them, with fixed gradients."""
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(total // n, generator=g).to(device).requires_grad_()
              for _ in range(n)]  # n x [total / n], leaves as an optimizer expects
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(device)
    return params


# %%
# The anti-pattern and the recommended patterns
# ---------------------------------------------
# ``foreach=False`` forces the for-loop, which is also what ``Adam(params)`` runs on the CPU.
def adam_for_loop(params):  # anti-pattern
    return torch.optim.Adam(params, lr=1e-3, foreach=False)


def adam_foreach(params):
    return torch.optim.Adam(params, lr=1e-3, foreach=True)


def adam_fused(params):  # recommended
    return torch.optim.Adam(params, lr=1e-3, fused=True)


implementations = {"for-loop": adam_for_loop, "foreach": adam_foreach,
                   "fused": adam_fused}


def make_opt(params, impl):
    return implementations[impl](params)


# Use fused only where this torch has it for this device: older releases raise here.
skipped = []
try:
    make_opt(make_params(1), "fused").step()
except (RuntimeError, ValueError, TypeError) as err:
    print(f"fused Adam does not run on {device.type} in torch {torch.__version__}:",
          str(err).splitlines()[0][:60])
    skipped.append(f"fused Adam: not supported on {device.type} in torch "
                   f"{torch.__version__}")
    del implementations["fused"]
print("implementations that run here:", ", ".join(implementations))

default = torch.optim.Adam(make_params(1))
print("Adam() defaults: foreach =", default.defaults["foreach"], "| fused =",
      default.defaults.get("fused"), "(None: chosen per device at the first step)")

# %%
# Check: every implementation computes the same update
# ----------------------------------------------------
# Five steps from identical parameters and gradients; the results agree to float32 rounding.
results = {}
for impl in implementations:
    params = make_params(4)
    opt = make_opt(params, impl)
    for _ in range(5):
        opt.step()
    results[impl] = torch.cat([p.detach().flatten() for p in params])
for value in results.values():
    torch.testing.assert_close(value, results["for-loop"], rtol=1e-5, atol=1e-6)
print("after 5 steps all implementations agree:", ", ".join(results))

# %%
# Measurement
# -----------
# One timed call is one ``opt.step()`` (gradients stay fixed; the state keeps updating,
# which costs the same every step). Two comparisons per tensor count, one per rung of the
# documented ordering: foreach against the for-loop, and fused against foreach.
foreach_gain, fused_gain = [], []
for n in counts:
    opts = {impl: make_opt(make_params(n), impl) for impl in implementations}
    for opt in opts.values():
        opt.step()  # warm-up: the first step allocates the optimizer state
    foreach_gain.append(compare_times(
        f"foreach over for-loop, {n} tensors",
        {"for-loop": opts["for-loop"].step, "foreach": opts["foreach"].step},
        threshold=1.10, device=device, x=n, budget_s=1.5))
    if "fused" in opts:
        fused_gain.append(compare_times(
            f"fused over foreach, {n} tensors",
            {"foreach": opts["foreach"].step, "fused": opts["fused"].step},
            threshold=1.10, device=device, x=n, budget_s=1.5))

# %%
# Where it pays
# -------------
# Each rung of the ordering against the number of tensors the same weights are split into.
series = {"foreach over for-loop": foreach_gain}
if fused_gain:
    series["fused over foreach"] = fused_gain
fig = plot_ratios(series, xlabel=f"parameter tensors ({total:,} weights in all)",
                  title="Adam.step()",
                  ylabel="slower variant time / faster variant time")

# %%
# Verdict
# -------
# Each rung *gains* at a tensor count when the interval of its speed-up lies above 1.10.
# With a single tensor there is no per-tensor overhead for foreach to save (the for-loop
# runs its ops once too), so that point is shown, not judged.
RULE = ("holds if foreach beats the for-loop by >10% (interval above 1.10) at every "
        "count above 1 tensor (at 1 tensor there is no loop to save: shown, not "
        "judged) and fused runs here and beats foreach by >10% at every count; "
        "otherwise depends if either rung gains at any of those counts, wrong if "
        "neither does")
groups = {"foreach over for-loop": [c for c in foreach_gain if c["x"] > 1],
          "foreach over for-loop, 1 tensor": [c for c in foreach_gain if c["x"] == 1]}
cases = [("depends", {"foreach over for-loop": "any above"}), ("wrong", {})]
if fused_gain:
    groups["fused over foreach"] = fused_gain
    cases = [("holds", {"foreach over for-loop": "all above",
                        "fused over foreach": "all above"}),
             ("depends", {"foreach over for-loop": "any above"}),
             ("depends", {"fused over foreach": "any above"}),
             ("wrong", {})]
decision = decide(device, cases, groups=groups, key=foreach_gain[-1])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": skipped}

# %%
# When not to use it
# ------------------
# ``foreach`` keeps a list of intermediates for all parameters at once: the docstring warns
# it "uses ~ sizeof(params) more peak memory than the for-loop version". If memory is the
# limit, keep the for-loop. With a handful of large tensors it buys little (see the figure).
# ``fused`` on the CPU is beta and needs torch 2.4 or later; check that it is supported for
# your optimizer (Adam, AdamW, SGD, Adagrad) and device, as this tip does, before relying on
# it.

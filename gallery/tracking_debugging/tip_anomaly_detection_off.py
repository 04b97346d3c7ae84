"""
Anomaly detection: switch it on to find a NaN, off to train
===========================================================

The seed articles never mention autograd's anomaly mode. PyTorch's *Performance Tuning Guide*
("Disable debugging APIs") lists it first:

    "Many PyTorch APIs are intended for debugging and should be disabled for
    regular training runs:"

    "anomaly detection: torch.autograd.detect_anomaly or torch.autograd.set_detect_anomaly(True)"

Anomaly mode records a Python stack trace for every op in the forward pass and checks every
backward output for NaN. That is exactly what you want while hunting a NaN, and overhead
otherwise. The stack traces cost the same per op whatever its size; the NaN checks read every
gradient, so they grow with the model. This tip shows what anomaly mode catches and measures
what it costs per training step, from tiny layers to wide ones.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["tracking", "training", "autograd"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "detect_anomaly names the backward op that made a NaN; its stack traces and NaN checks can slow training steps (see the figure): debug with it, train without."
# sphinx_gallery_tips_statement = "Many PyTorch APIs are intended for debugging and should be disabled for regular training runs: anomaly detection: torch.autograd.detect_anomaly or torch.autograd.set_detect_anomaly(True)"
# sphinx_gallery_tips_keywords = ["torch.autograd.detect_anomaly", "set_detect_anomaly", "anomaly mode", "NaN", "debugging", "SqrtBackward0"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/docs/stable/autograd.html#anomaly-detection"]
# sphinx_gallery_tips_rules = ["PTT034"]

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
# One CPU thread: the question is not parallelism, and one thread keeps timings stable on a
# busy machine.
import warnings

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

# %%
# What it catches
# ---------------
# ``sqrt`` at 0 has an infinite derivative; multiplied by a zero upstream gradient it becomes
# NaN. Without anomaly mode the NaN lands silently in ``.grad``.
x = torch.tensor([0.0, 4.0], device=device, requires_grad=True)
mask = torch.tensor([0.0, 1.0], device=device)
(torch.sqrt(x) * mask).sum().backward()
print("without anomaly mode: x.grad =", x.grad.tolist(), "(no error)")

x.grad = None
caught_op = None
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with torch.autograd.detect_anomaly():
        try:
            (torch.sqrt(x) * mask).sum().backward()
        except RuntimeError as err:
            caught_op = str(err).splitlines()[0]
assert caught_op is not None, "anomaly mode should raise on the NaN"
print("with anomaly mode:    RuntimeError:", caught_op)
for w in caught:
    print(f"  {w.category.__name__}: {str(w.message).splitlines()[0][:70]}")


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The same training step; the anti-pattern leaves anomaly mode switched on.
def make_step(width, depth=4):  # recommended: the plain step
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.randn(32, width, device=device)  # [batch, width]

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(data).square().mean()
        loss.backward()
        opt.step()
        return loss

    return step


def with_anomaly(step):  # anti-pattern
    def run():
        with torch.autograd.set_detect_anomaly(True):
            return step()
    return run


# %%
# Check: the step computes the same loss either way
# -------------------------------------------------
# Anomaly mode warns each time it is switched on; the warning is silenced from here on.
warnings.filterwarnings("ignore", message="Anomaly Detection has been enabled")
torch.manual_seed(1)
plain_loss = make_step(64)()
torch.manual_seed(1)
anomaly_loss = with_anomaly(make_step(64))()
torch.testing.assert_close(plain_loss, anomaly_loss, rtol=0, atol=0)
print("same loss with and without anomaly mode:", plain_loss.item())
assert not torch.is_anomaly_enabled(), "anomaly mode must be off after the context"

# %%
# Measurement
# -----------
# One timed statement is one training step (forward, backward, SGD update) of a 4-layer MLP,
# batch 32, at widths from tiny (per-op overhead dominates) to wide (arithmetic dominates).
# A GPU needs wider layers before the arithmetic dominates.
widths = {"cpu": [16, 64, 256, 512], "cuda": [64, 256, 1024, 2048]}[device.type]
slowdowns = []
for width in widths:
    step = make_step(width)
    slowdowns.append(compare_times(
        f"slowdown at width {width}",
        {"anomaly mode on": with_anomaly(step), "anomaly mode off": step},
        threshold=1.10, device=device, x=width, budget_s=1.5))

# %%
# Where it costs
# --------------
# The slowdown of a training step with anomaly mode on, at each width, with its interval.
fig = plot_ratios({"anomaly mode on vs off": slowdowns},
                  xlabel="layer width (features)", ylabel="step time, anomaly on / off",
                  title="4-layer MLP training step, batch 32")

# %%
# Verdict
# -------
# The advice (switch it off for training) holds if anomaly mode slows the step by more than
# 10% at every width: the interval of the slowdown lies above 1.10. Inside the noise or below
# counts as not costly at that width.
RULE = ("holds if anomaly mode slows a training step by >10% at every width (interval "
        "above 1.10); wrong if at no width; depends otherwise")
decision = decide(device, [("holds", {"slowdown": "all above"}),
                           ("wrong", {"slowdown": "none above"}),
                           ("depends", {})],
                  groups={"slowdown": slowdowns}, facts={"NaN caught in": caught_op},
                  key=slowdowns[-1])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# Turn it on for the few steps around a NaN (``with torch.autograd.detect_anomaly():``), read
# the op it names and the forward traceback it prints, then turn it off. The same guide lists
# the other debugging APIs to keep out of normal runs: ``torch.autograd.profiler.profile``,
# ``torch.autograd.profiler.emit_nvtx`` and ``gradcheck``/``gradgradcheck``; the profiler is
# for a few measured steps, not a whole training run.

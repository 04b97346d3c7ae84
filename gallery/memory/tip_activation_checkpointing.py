"""
Activation checkpointing: memory saved versus time spent recomputing
====================================================================

The seed articles never mention activation checkpointing. PyTorch's *Performance Tuning Guide*
recommends it ("Checkpoint intermediate buffers"):

    "Buffer checkpointing is a technique to mitigate the memory capacity burden of
    model training. Instead of storing inputs of all layers to compute upstream
    gradients in backward propagation, it stores the inputs of a few layers and
    the others are recomputed during backward pass."

    "The best is not to store large layer outputs that have small re-computation cost.
    The example target layers are activation functions (e.g. ``ReLU``, ``Sigmoid``, ``Tanh``)"

and the ``torch.utils.checkpoint.checkpoint`` docstring adds: "It is recommended that you use
``use_reentrant=False``." This tip measures the memory held from the end of forward until
backward, with and without checkpointing, for 2 to 16 blocks; on CUDA also the peak of forward
plus backward, which includes the recompute; and it times the recompute.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["training", "autograd"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "2.1"
# sphinx_gallery_tips_statement = "Checkpointing intermediate buffers (torch.utils.checkpoint, use_reentrant=False) cuts the memory kept for backward."
# sphinx_gallery_tips_takeaway = "checkpoint(use_reentrant=False) keeps only block inputs for backward: a multiple less memory at every depth, for one extra forward."
# sphinx_gallery_tips_keywords = ["torch.utils.checkpoint", "checkpoint", "use_reentrant", "activation checkpointing", "saved_tensors_hooks", "recompute"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/docs/stable/checkpoint.html"]

# %%
# How this tip measures and decides
# ---------------------------------
# The same helpers in every tip of this site (a test keeps the copies identical). Memory is
# measured, not computed: exact byte counts of live tensors on the CPU, the CUDA caching
# allocator's own counters on a GPU. Each comparison pairs the anti-pattern with the
# recommended pattern, one pair per round (here: per step count or size), as a difference or a
# ratio; the interval is a ~95% confidence interval for its median (with 5 rounds or fewer,
# their whole range). A verdict is the first case of the rule whose conditions the
# measurements meet.
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


def compare_values(name, variants, *, threshold, device, metric, unit, x=None,
                   measure="ratio"):
    """Compare samples measured otherwise: ``{"anti-pattern": [...], "fix": [...]}``.

    Samples pair up by position, one pair per round. ``measure="ratio"`` compares
    anti-pattern / recommended with ``threshold``; ``"difference"`` compares
    anti-pattern - recommended (for quantities that may be 0, e.g. bytes leaked per
    step).
    """
    import torch

    (base_name, base), (cand_name, cand) = variants.items()
    if measure == "ratio":
        ratios = [b / c for b, c in zip(base, cand)]
    else:
        ratios = [b - c for b, c in zip(base, cand)]
    mid, low, high = median_interval(ratios)
    return {"name": name, "device": torch.device(device).type,
            "threads": torch.get_num_threads(), "x": x, "metric": metric, "unit": unit,
            "measure": measure, "baseline": base_name, "candidate": cand_name,
            "base": list(base), "cand": list(cand), "ratios": ratios, "median": mid,
            "low": low, "high": high, "threshold": threshold,
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


def plot_series(series, *, xlabel, ylabel, title, device, logx=False):
    """Measured values against steps or size, one line per ``{label: (xs, ys)}``.

    Measured on ``device``; the title's second line names it, the thread count and the
    torch version.
    """
    import matplotlib.pyplot as plt
    import torch

    colours = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]
    markers = ["o", "s", "^", "D", "v", "P"]
    fig, ax = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
    for (label, (xs, ys)), colour, marker in zip(series.items(), colours, markers):
        ax.plot(xs, ys, marker=marker, color=colour, label=label)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    where = f"{torch.device(device).type.upper()}, {torch.get_num_threads()} thread(s)"
    ax.set_title(f"{title}\n{where}, torch {torch.__version__}", fontsize=10)
    ax.legend(fontsize=8)
    return fig


# %%
# Setup
# -----
# Blocks of a small matmul followed by cheap activations: exactly the guide's target, large
# outputs with a small recompute cost; wider on a GPU.
import torch
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
# One CPU thread: the question is not parallelism, and one thread keeps timings
# stable on a busy machine (small multi-threaded ops stall when others hold the cores).
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

BATCH, WIDTH = {"cpu": (1024, 128), "cuda": (1024, 256)}[device.type]
DEPTHS = [2, 4, 8, 16]
weights = [(torch.randn(WIDTH, WIDTH, device=device) / WIDTH**0.5).requires_grad_()
           for _ in range(max(DEPTHS))]
x = torch.randn(BATCH, WIDTH, device=device, requires_grad=True)  # [batch, width]


def block(h, w):
    h = h @ w
    return torch.tanh(torch.nn.functional.gelu(h)).sigmoid()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
def forward_plain(depth):
    h = x
    for w in weights[:depth]:
        h = block(h, w)
    return h.sum()


def forward_checkpointed(depth):
    h = x
    for w in weights[:depth]:
        h = checkpoint(block, h, w, use_reentrant=False)
    return h.sum()


# %%
# Check: identical gradients
# --------------------------
# Recomputing the same deterministic ops gives the same values, so the gradients match exactly.
def grads(fwd, depth):
    return torch.autograd.grad(fwd(depth), [x, *weights[:depth]])


for a, b in zip(grads(forward_plain, 4), grads(forward_checkpointed, 4)):
    torch.testing.assert_close(a, b, rtol=0, atol=0)
print("gradients identical with and without checkpointing")

# %%
# Memory held for backward, by depth
# ----------------------------------
# From the end of forward until backward. On the CPU: ``saved_tensors_hooks`` sees every
# tensor autograd saves, and each storage counts once (the input ``x`` and the weights live
# anyway and are left out). On CUDA: ``memory_allocated`` after forward, with the loss
# alive, minus before it; and the peak of forward plus backward (``max_memory_allocated``
# after ``reset_peak_memory_stats``), where the checkpointed version also holds one block's
# recomputed activations.
def held_for_backward(fwd, depth):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        loss = fwd(depth)
        torch.cuda.synchronize(device)
        return torch.cuda.memory_allocated(device) - before
    live = {t.untyped_storage().data_ptr() for t in [x, *weights]}
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in live:
            storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fwd(depth)
    del loss
    return sum(storages.values())


def peak_of_step(fwd, depth):
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    grads(fwd, depth)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


VARIANTS = {"plain": forward_plain, "checkpointed": forward_checkpointed}
held = {name: [held_for_backward(fwd, d) / 2**20 for d in DEPTHS]
        for name, fwd in VARIANTS.items()}
peak = {}
if torch.cuda.is_available():
    peak = {name: [peak_of_step(fwd, d) / 2**20 for d in DEPTHS]
            for name, fwd in VARIANTS.items()}
print("MiB, plain and checkpointed: held for backward"
      + ("; peak of forward + backward" if peak else ""))
for i, depth in enumerate(DEPTHS):
    line = f"depth {depth:2d}: {held['plain'][i]:7.2f}, {held['checkpointed'][i]:7.2f}"
    if peak:
        line += f"; {peak['plain'][i]:7.2f}, {peak['checkpointed'][i]:7.2f}"
    print(line)


def reduction(name, values, depth_index):
    return compare_values(f"{name}, depth {DEPTHS[depth_index]}",
                          {"plain": [values["plain"][depth_index]],
                           "checkpointed": [values["checkpointed"][depth_index]]},
                          threshold=1.5, device=device, metric=name, unit="MiB",
                          x=DEPTHS[depth_index])


saving = [reduction("memory held for backward", held, i) for i in range(len(DEPTHS))]
peak_saving = ([reduction("peak of forward + backward", peak, i)
                for i in range(len(DEPTHS))] if peak else [])

# %%
# Time: the recompute cost
# ------------------------
# One timed statement is forward plus backward at depth 4, the variants in alternating
# rounds; the ratio is checkpointed time / plain time, the price of the saving.
cost = compare_times("time, checkpointed / plain (depth 4)",
                     {"checkpointed": lambda: grads(forward_checkpointed, 4),
                      "plain": lambda: grads(forward_plain, 4)},
                     threshold=1.0, device=device, x=4, budget_s=1.5)

# %%
# Memory against depth
# --------------------
series = {f"{name}: held for backward": (DEPTHS, values)
          for name, values in held.items()}
series |= {f"{name}: peak of forward + backward": (DEPTHS, values)
           for name, values in peak.items()}
fig = plot_series(series, xlabel="blocks (depth)", ylabel="memory (MiB)",
                  title=f"Activation checkpointing, batch {BATCH}, width {WIDTH}",
                  device=device)

# %%
# Verdict
# -------
# The advice is about memory: it holds if the memory held for backward shrinks by more than
# 1.5x at every depth (exact counts; one round each). The time cost and, on CUDA, the peak
# are shown beside it and decide nothing.
RULE = ("holds if checkpointing reduces the memory held for backward by more than "
        "1.5x at every depth; wrong if at none; depends otherwise")
groups = {"memory held for backward": saving, "time cost": [cost]}
if peak_saving:
    groups["peak of forward + backward"] = peak_saving
decision = decide(device, [("holds", {"memory held for backward": "all above"}),
                           ("wrong", {"memory held for backward": "none above"}),
                           ("depends", {})],
                  groups=groups, key=saving[-1])
report(decision, RULE)
skipped = [] if peak else ["peak of forward + backward (max_memory_allocated): "
                           "needs CUDA (no CUDA device in this build)"]
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": skipped}

# %%
# When not to use it
# ------------------
# Checkpointing a matmul- or conv-heavy block saves little (their inputs must be kept anyway)
# and repeats the expensive part. Random ops inside a checkpointed block (dropout) are replayed
# with the saved RNG state, which costs a little more. During backward the checkpointed
# version holds one block's recomputed activations on top of what it saved, so the peak falls
# by less than the memory held between forward and backward. When memory is not the limit,
# it only makes training slower.

"""
``channels_last`` memory format for convolutions
================================================

The seed articles never mention memory formats. PyTorch's *Performance Tuning Guide* recommends
it for vision models ("Enable channels_last memory format for computer vision models"):

    "PyTorch 1.5 introduced support for ``channels_last`` memory format for
    convolutional networks. This format is meant to be used in conjunction with
    AMP to further accelerate convolutional neural networks with Tensor Cores."

The guide's reasoning is about GPUs with Tensor Cores, so on CUDA this tip measures it as the
guide says, under AMP (``torch.autocast`` with float16). On the CPU, AMP means bfloat16, which
is only fast on CPUs with bfloat16 instructions (see the bf16 autocast tip), so the CPU is
measured in float32, its default; oneDNN's CPU convolutions also prefer a channels-last layout
and reorder a default (NCHW) input inside every call. This tip converts a small conv stack and
its input with ``memory_format=torch.channels_last`` and times it across channel counts.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["inference", "mixed-precision"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.10"
# sphinx_gallery_tips_takeaway = "channels_last changes only strides; convert model and input once, measure on your device: the figure shows where it pays here."
# sphinx_gallery_tips_statement = "Converting a conv net and its input to channels_last makes it faster, used with AMP on GPUs with Tensor Cores (PyTorch Performance Tuning Guide)."
# sphinx_gallery_tips_keywords = ["channels_last", "memory_format", "NHWC", "Conv2d", "contiguous_format", "oneDNN", "autocast", "Tensor Cores"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/tutorials/intermediate/memory_format_tutorial.html"]

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
# Three 3x3 convolutions with ReLU, inference only. AMP (float16) on CUDA, as the guide says;
# float32 on the CPU.
import contextlib
import copy

import torch

torch.manual_seed(0)
# One CPU thread: the question is not parallelism, and one thread keeps timings
# stable on a busy machine (multi-threaded small ops stall when other processes hold
# the cores).
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
amp_dtype = {"cpu": None, "cuda": torch.float16}[device.type]
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}, "
      f"precision: {'autocast ' + str(amp_dtype) if amp_dtype else 'float32'}")

def make_model(channels):
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, channels, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.ReLU(),
    ).to(device).eval()


def infer(m, inp):
    precision = (torch.autocast(device.type, dtype=amp_dtype) if amp_dtype
                 else contextlib.nullcontext())
    with torch.inference_mode(), precision:
        return m(inp)


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# Default: NCHW (``contiguous_format``). Recommended: convert the model *and* the input;
# the conversion changes strides only, never shapes.
model = make_model(32)
model_cl = copy.deepcopy(model).to(memory_format=torch.channels_last)

x = torch.randn(8, 3, 32, 32, device=device)  # [batch, channels, height, width]
x_cl = x.to(memory_format=torch.channels_last)
print("NCHW strides:         ", x.stride())
print("channels_last strides:", x_cl.stride(), "| same shape:", x_cl.shape == x.shape)

# %%
# Check: same numbers, and the format survives the convolutions
# --------------------------------------------------------------
# The two layouts run different kernels, which round differently. In float16 (~3 significant
# digits) they agree to about 1e-2; in float32 on the CPU to 1e-4. A float32 tolerance would
# fail on CUDA even without AMP: cuDNN may run float32 convolutions in TF32
# (``torch.backends.cudnn.allow_tf32``, on by default), 10 bits of mantissa.
out, out_cl = infer(model, x), infer(model_cl, x_cl)
tol = 1e-2 if amp_dtype else 1e-4
torch.testing.assert_close(out_cl, out, rtol=tol, atol=tol)
print(f"outputs match to {tol:g} ({out.dtype}); output is channels_last:",
      out_cl.is_contiguous(memory_format=torch.channels_last))

# %%
# Measurement
# -----------
# Channel counts from few (each convolution is cheap next to reordering its input and output)
# to many (the arithmetic dominates). Speed-up = NCHW time / channels_last time. A GPU gets a
# larger batch and larger images, so that its largest sizes keep it busy.
batch, side = {"cpu": (4, 32), "cuda": (32, 56)}[device.type]
channel_counts = [8, 16, 32, 64]
speedups = []
for channels in channel_counts:
    model = make_model(channels)
    model_cl = copy.deepcopy(model).to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, side, side, device=device)  # [batch, 3, side, side]
    x_cl = x.to(memory_format=torch.channels_last)
    speedups.append(compare_times(
        f"speed-up at {channels} channels",
        {"NCHW": lambda: infer(model, x),
         "channels_last": lambda: infer(model_cl, x_cl)},
        threshold=1.0, device=device, x=channels))

# %%
# Where it pays
# -------------
# The speed-up of channels_last over NCHW at each channel count, with its interval.
fig = plot_ratios({f"channels_last vs NCHW ({out.dtype})": speedups},
                  xlabel="channels per convolution (log scale)",
                  title=f"3-conv stack forward, batch {batch}, {side}x{side} images")

# %%
# Verdict
# -------
# The guide promises a speed-up without a number, so the threshold is 1.0: channels_last is
# *faster* at a channel count when the interval of its speed-up lies above 1.0 and *slower*
# when it lies below; an interval across 1.0 is inside this machine's noise and is evidence
# neither way, so it never flips the verdict. It holds when channels_last is faster at some
# channel counts and slower at none, depends on the channel count when both happen, and is
# wrong when it is faster at none.
RULE = ("holds if channels_last is faster (interval of NCHW time / channels_last time "
        "above 1.0) at some channel count and slower (interval below 1.0) at none; "
        "depends on the channel count if both happen; wrong if it is faster at none. "
        "CUDA is measured under float16 autocast, as the guide says; the CPU in "
        "float32")
decision = decide(device, [("depends", {"faster": "any above", "slower": "any below"}),
                           ("holds", {"faster": "any above"}),
                           ("wrong", {})],
                  groups={"faster": speedups, "slower": speedups}, key=speedups[-1])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# Only 4-D (NCHW) tensors have a ``channels_last`` format (5-D: ``channels_last_3d``). Models
# that mix convolutions with ``view``/``reshape`` on the channel dimension pay for conversions
# back and forth. Convert once at model load, not per batch, and keep it only if it measures
# faster on your device, at your sizes and precision.

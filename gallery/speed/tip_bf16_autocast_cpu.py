"""
bfloat16 autocast for CPU inference
===================================

The seed articles discuss mixed precision only for GPUs (float16 with a gradient scaler). The
``torch.amp`` documentation also covers CPUs:

    "Some ops, like linear layers and convolutions, are much faster in `lower_precision_fp`."

    "As shown in the CPU example section of ``torch.autocast``, "automatic mixed precision
    training/inference" on CPU with datatype of `torch.bfloat16` only uses ``torch.autocast``."

Whether bfloat16 is *faster* on a CPU is decided by the hardware: CPUs with bfloat16 dot-product
instructions (x86 ``avx512_bf16`` or AMX ``amx_bf16``; Arm ``bf16``) compute it natively; the
others convert to float32 and back around every op. This tip finds out which kind of CPU it runs
on, then times a Linear-heavy model in float32 and under
``torch.autocast("cpu", dtype=torch.bfloat16)`` across batch sizes, and measures the error.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["mixed-precision", "inference"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.10"
# sphinx_gallery_tips_takeaway = "bf16 autocast on CPU pays only on CPUs with bf16 instructions (AVX512-BF16, AMX, Arm BF16) and large batches; elsewhere it is slower."
# sphinx_gallery_tips_statement = "torch.autocast('cpu', dtype=torch.bfloat16) makes linear layers much faster than float32 for CPU inference (torch.amp docs)."
# sphinx_gallery_tips_keywords = ["torch.autocast", "bfloat16", "bf16", "CPU", "AMX", "avx512_bf16", "mixed precision inference"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/amp.html"]

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
# This tip is about the CPU path, so it runs on the CPU even where a GPU exists. One thread:
# the question is not parallelism, and one thread keeps timings stable on a busy machine.
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cpu")

# Instructions that compute bfloat16 dot products natively, as
# torch.cpu.get_capabilities() (torch 2.13+) and Linux's /proc/cpuinfo name them.
BF16_INSTRUCTIONS = ("avx512_bf16", "amx_bf16", "bf16", "sve_bf16", "svebf16")


def bf16_instructions():
    """The bf16 instructions this CPU has (a list, None if unknown), and how we know."""
    if hasattr(torch.cpu, "get_capabilities"):
        caps = torch.cpu.get_capabilities()
        found = [f for f in BF16_INSTRUCTIONS if caps.get(f) is True]
        return found, "torch.cpu.get_capabilities()"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):  # x86, Arm
                    found = set(line.split(":", 1)[1].split())
                    return [f for f in BF16_INSTRUCTIONS if f in found], "/proc/cpuinfo"
    except OSError:
        pass
    return None, "not detectable here"


found, source = bf16_instructions()
bf16_hw = None if found is None else bool(found)
capability = (torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu")
              else "unknown")
print(f"device: cpu, threads: {torch.get_num_threads()}, torch {torch.__version__}, "
      f"ATen CPU capability: {capability}")
print(f"bf16 instructions ({source}):", "unknown" if found is None else found or "none")


def make_model(width, depth=4):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).eval()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# Weights stay float32; autocast runs the eligible ops (``linear``) in bfloat16, casting the
# weights on every call.
def predict_fp32(model, x):
    with torch.inference_mode():
        return model(x)


def predict_bf16(model, x):
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        return model(x)


# %%
# Check: how far off is bfloat16?
# -------------------------------
# bfloat16 keeps float32's range but only 8 bits of mantissa (~3 significant digits), so
# outputs differ; the question is by how much relative to their size.
width = 512
model = make_model(width)
x = torch.randn(64, width)  # [batch, features]
ref, low = predict_fp32(model, x), predict_bf16(model, x)
print("output dtype under autocast:", low.dtype)
max_abs = (low.float() - ref).abs().max().item()
rel = max_abs / ref.abs().max().item()
print(f"max abs error {max_abs:.3e} (relative to max |output|: {rel:.2e})")
torch.testing.assert_close(low.float(), ref, rtol=5e-2,
                           atol=5e-2 * ref.abs().max().item())

# %%
# Measurement
# -----------
# Batch sizes from one sample (the per-call weight casts dominate) to batches where the matmuls
# dominate. Speed-up = float32 time / bfloat16 autocast time.
batches = [1, 8, 64, 256]
speedups = []
for batch in batches:
    x = torch.randn(batch, width)  # [batch, features]
    speedups.append(compare_times(
        f"autocast speed-up at batch {batch}",
        {"float32": lambda: predict_fp32(model, x),
         "bf16 autocast": lambda: predict_bf16(model, x)},
        threshold=1.1, device=device, x=batch, budget_s=1.5))

# %%
# Where it pays
# -------------
# The speed-up of bfloat16 autocast over float32 at each batch size, with its interval. Above
# 1.0 bfloat16 is faster; below, the casts cost more than the bfloat16 arithmetic saves.
hw_label = "unknown" if found is None else ", ".join(found) or "none"
fig = plot_ratios({f"bf16 autocast (bf16 instructions: {hw_label})": speedups},
                  xlabel="batch size (samples, log scale)",
                  title=f"4-layer MLP forward, width {width}, on the CPU")

# %%
# Verdict
# -------
# Whether the CPU has bfloat16 instructions decides the answer, so it is part of the rule.
# On a CPU without them (or where they cannot be detected) the verdict is that it depends on
# the hardware, and the figure shows what autocast does on such a CPU. With them, bfloat16
# must gain more than 10% (interval above 1.1) at every batch size to hold; with a clear
# non-gain (interval below 1.1) at every batch size it is wrong; otherwise it depends on the
# batch size.
RULE = ("on a CPU with bf16 instructions (avx512_bf16, amx_bf16, Arm bf16): holds if "
        "bf16 autocast is >1.1x faster than float32 at every batch size (interval "
        "above 1.1), wrong if below 1.1 at every one, depends on the batch size "
        "otherwise; on a CPU without them (or unknown): depends on the hardware")
decision = decide(device, [("holds", {"bf16 hardware": True, "speed-up": "all above"}),
                           ("wrong", {"bf16 hardware": True, "speed-up": "all below"}),
                           ("depends", {})],
                  groups={"speed-up": speedups},
                  facts={"bf16 hardware": bf16_hw, "bf16 instructions": hw_label,
                         "ATen CPU capability": capability},
                  key=speedups[-1])
report(decision, RULE)
RESULT = {
    "rule": RULE,
    "verdicts": {"cpu": decision},
    "measurements": [{"variant": f"bf16 autocast, width {width}, batch 64",
                      "metric": "max abs error vs float32", "unit": "",
                      "value": max_abs, "device": "cpu"}],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# On a CPU without bfloat16 instructions keep float32: autocast only adds conversions there
# (the figure's legend names the instructions of the CPU it ran on). With them, check
# accuracy on your own outputs first: logits that are compared closely (ranking, thresholds)
# can flip at 3 significant digits, and small batches may not gain, because autocast re-casts
# every float32 weight on every call. For GPU float16 training with a gradient scaler see the
# mixed-precision tip.

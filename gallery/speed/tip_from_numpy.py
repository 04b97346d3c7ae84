"""
``torch.from_numpy`` and ``torch.as_tensor`` share memory, ``torch.tensor`` copies
===================================================================================

The article's eighth tip (claim S1-8):

    "Use `torch.from_numpy(numpy_array)` and `torch.as_tensor(others)` instead of
    `torch.tensor`. If both the source device and target device are CPU, `torch.from_numpy`
    and `torch.as_tensor` may not create data copies."

It goes on: for a NumPy array ``from_numpy`` is the faster call, and for a *tensor* of the same
dtype and device ``as_tensor`` may avoid the copy too. ``torch.tensor`` always copies its data.
``torch.from_numpy`` never does: the tensor is a view of the array's buffer. ``torch.as_tensor``
shares when it can (same dtype, same device, a buffer to share) and copies otherwise. This tip
checks each of those cases, then times the conversions on arrays from ten to a million
elements.
"""
# sphinx_gallery_tips_claims = ["S1-8"]
# sphinx_gallery_tips_tags = ["numpy", "data-loading"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "from_numpy (and as_tensor on a same-dtype array or tensor) shares memory; torch.tensor copies, slower at every size, more so as arrays grow."
# sphinx_gallery_tips_keywords = ["from_numpy", "as_tensor", "torch.tensor", "numpy to tensor", "zero-copy", "shares memory", "np.shares_memory"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.from_numpy.html", "https://pytorch.org/docs/stable/generated/torch.as_tensor.html"]
# sphinx_gallery_tips_rules = ["PTT014"]

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
# The claim is about host memory ("source device and target device are CPU"), so this tip
# runs on the CPU whatever the machine has: a NumPy array lives on the host, and moving it to
# a GPU is a copy by definition. One thread: the question is copy or no copy, not
# parallelism, and one thread keeps small calls from stalling on a busy machine.
import warnings

import numpy as np
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}, numpy {np.__version__}")


def shares(array, tensor):
    """True when the tensor's data lies in the array's buffer."""
    return np.shares_memory(array, tensor.numpy())


def same_storage(a, b):
    """True when two tensors start at one address: one buffer, not a copy."""
    return a.data_ptr() == b.data_ptr()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
array = np.arange(6, dtype=np.float32)  # [6]
copied = torch.tensor(array)      # anti-pattern: always a copy
viewed = torch.from_numpy(array)  # recommended: a view of the array's buffer
as_t = torch.as_tensor(array)     # recommended: a view too (same dtype, CPU)

# %%
# Check: same values, and who sees a write
# ----------------------------------------
torch.testing.assert_close(copied, viewed)
torch.testing.assert_close(as_t, viewed)
array[0] = 100.0
print(f"after array[0] = 100: torch.tensor -> {copied[0].item():g}, "
      f"from_numpy -> {viewed[0].item():g}, as_tensor -> {as_t[0].item():g}")
viewed[1] = -1.0  # and the other way round
print(f"after tensor[1] = -1 via from_numpy: array[1] = {array[1]:g}")
assert copied[0] == 0 and viewed[0] == as_t[0] == 100 and array[1] == -1

# %%
# When each call shares, for arrays and for tensors
# -------------------------------------------------
# ``as_tensor`` on a *tensor* returns that very tensor when dtype and device already match,
# and a converted copy when they differ. ``torch.tensor`` of a tensor copies, and says so.
source = torch.arange(6, dtype=torch.float32)  # [6], a tensor this time
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    tensor_copy = torch.tensor(source)
for w in caught:
    print(f"torch.tensor(a_tensor) warns: {str(w.message).splitlines()[0][:48]}...")
facts = {
    "from_numpy(array) shares": shares(array, viewed),
    "as_tensor(array) shares": shares(array, as_t),
    "torch.tensor(array) shares": shares(array, copied),
    "as_tensor(tensor) is the tensor": torch.as_tensor(source) is source,
    "as_tensor(tensor, float64) shares": same_storage(
        source, torch.as_tensor(source, dtype=torch.float64)),
    "torch.tensor(tensor) shares": same_storage(source, tensor_copy),
}
others = {
    "as_tensor(array, dtype=float64) shares":
        shares(array, torch.as_tensor(array, dtype=torch.float64)),
    "as_tensor(array[::2]) shares (a strided view)":
        shares(array, torch.as_tensor(array[::2])),
}
for name, value in {**facts, **others}.items():
    print(f"{name:<46} {value}")
try:
    torch.from_numpy(array[::-1])
except ValueError as err:
    print("from_numpy(array[::-1]) raises ValueError:", str(err).split(",")[0])
else:
    raise AssertionError("expected negative strides to be rejected")

# %%
# Measurement
# -----------
# Float32 arrays from ten to a million elements. Two comparisons per size: ``torch.tensor``
# (a copy) against ``from_numpy``, and ``as_tensor`` against ``from_numpy`` (the article says
# ``from_numpy`` is the faster call for an array: ``as_tensor`` first inspects its input).
sizes = [10, 1_000, 100_000, 1_000_000]
no_copy, direct = [], []
for n in sizes:
    src = np.random.default_rng(0).standard_normal(n, dtype=np.float32)  # [n]
    no_copy.append(compare_times(
        f"from_numpy over torch.tensor, {n:,} elements",
        {"torch.tensor": lambda: torch.tensor(src),
         "from_numpy": lambda: torch.from_numpy(src)},
        threshold=1.2, device=device, x=n))
    direct.append(compare_times(
        f"from_numpy over as_tensor, {n:,} elements",
        {"as_tensor": lambda: torch.as_tensor(src),
         "from_numpy": lambda: torch.from_numpy(src)},
        threshold=1.2, device=device, x=n))

# %%
# Where it pays
# -------------
# How many times faster ``from_numpy`` is than each other call, with its interval. The copy
# grows with the array; the sharing calls cost the same at every size.
fig = plot_ratios({"torch.tensor / from_numpy": no_copy,
                   "as_tensor / from_numpy": direct},
                  xlabel="array size (float32 elements)", title="NumPy array to tensor",
                  ylabel="other call time / from_numpy time")
fig.axes[0].set_yscale("log")  # the ratios span two orders of magnitude

# %%
# Verdict
# -------
# The claim has two parts: the sharing calls avoid the copy (facts above), and for an array
# ``from_numpy`` is the faster call. A speed-up counts where its interval lies above 1.2
# (20% faster), over ``torch.tensor`` and over ``as_tensor``.
RULE = ("holds if from_numpy and as_tensor share the array, as_tensor returns a "
        "same-dtype tensor itself and copies for another dtype, torch.tensor copies, "
        "and from_numpy is >1.2x faster than torch.tensor and than as_tensor at every "
        "size (interval above 1.2); wrong if from_numpy or as_tensor copies the array "
        "or from_numpy is >1.2x faster than torch.tensor at no size; depends otherwise")
shared = {name: True for name in ("from_numpy(array) shares", "as_tensor(array) shares",
                                  "as_tensor(tensor) is the tensor")}
copies = {name: False for name in ("torch.tensor(array) shares",
                                   "as_tensor(tensor, float64) shares",
                                   "torch.tensor(tensor) shares")}
decision = decide(device, [
    ("holds", {**shared, **copies, "from_numpy over torch.tensor": "all above",
               "from_numpy over as_tensor": "all above"}),
    ("wrong", {"from_numpy(array) shares": False}),
    ("wrong", {"as_tensor(array) shares": False}),
    ("wrong", {"from_numpy over torch.tensor": "none above"}),
    ("depends", {}),
], groups={"from_numpy over torch.tensor": no_copy,
           "from_numpy over as_tensor": direct},
    facts=facts, key=no_copy[1])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# Sharing is the point and the risk: writes to the array show in the tensor and back, and the
# array stays alive as long as the tensor. Use ``torch.tensor`` (or ``.clone()``) when you
# want an independent copy. ``from_numpy`` rejects negative strides (``array[::-1]``) and
# warns on read-only arrays. ``as_tensor`` with another dtype or device copies, as shown
# above: on the way to a GPU, ``torch.as_tensor(array, device="cuda")`` is a copy anyway, and
# pinned memory with ``non_blocking=True`` is what speeds that copy up.

"""
Pinned host memory for host-to-GPU copies
=========================================

The seed articles never mention pinned memory. PyTorch's data-loading documentation
("Memory Pinning") says:

    "Host to GPU copies are much faster when they originate from pinned (page-locked)
    memory."

and the CUDA notes ("Use pinned memory buffers") add that once a tensor is pinned, copies can
be asynchronous, while warning that "pinning is often an expensive operation". This tip times
the same host-to-GPU copy from ordinary (pageable) and from pinned memory across copy sizes,
and the copy with the pinning done for every batch. Everything it measures needs a CUDA
device: the claim is about copies to a GPU, so a machine without one decides nothing.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["data-loading", "cuda", "device"]
# sphinx_gallery_tips_devices = ["cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "Copies to the GPU from pinned memory are faster, more so for big batches; pinning each batch yourself costs more than it saves: pin once."
# sphinx_gallery_tips_statement = "Host to GPU copies are much faster when they originate from pinned (page-locked) memory."
# sphinx_gallery_tips_keywords = ["pin_memory", "pinned memory", "page-locked", "non_blocking", "DataLoader", "host to device copy"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/data.html#memory-pinning", "https://docs.pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers"]
# sphinx_gallery_tips_rules = ["PTT021"]

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
# busy machine (multi-threaded small ops stall when other processes hold the cores).
import warnings

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")
skipped = []
if device.type != "cuda":
    skipped.append("host-to-GPU copy timings: the claim is about CUDA, none here")
    print("Skipped:", skipped[-1])

    # Page-locked memory is allocated through the accelerator's driver, so without one
    # there is nothing to pin with: ``pin_memory()`` raises, the DataLoader warns.
    try:
        torch.randn(1024).pin_memory()
    except RuntimeError as err:
        print("x.pin_memory() raises RuntimeError:", str(err).splitlines()[0][:50])
    else:
        print("x.pin_memory() works here: another accelerator provides pinned memory")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=4,
                                             pin_memory=True)
        next(iter(loader))
    for w in caught:
        print("DataLoader(pin_memory=True) warns:", str(w.message).splitlines()[0][:50])


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The same blocking ``.to(device)`` call from each kind of memory, so that only where the
# data lies differs. The third variant pins a pageable batch right before copying it, as
# code that calls ``.pin_memory()`` in its training loop does. In a training loop the
# batches come from a ``DataLoader``, which hands out pageable batches unless it is
# asked to pin them (``pin_memory=True``, done off the loop's critical path).
def copy_pageable(src):  # anti-pattern
    return src.to(device)  # the driver stages it through its own pinned buffer


def copy_pinned(src_pinned):  # recommended
    return src_pinned.to(device)  # DMA straight from page-locked memory


def pin_then_copy(src):  # anti-pattern too
    return src.pin_memory().to(device)  # an extra host copy every time


def pageable_loader(dataset):  # anti-pattern
    return torch.utils.data.DataLoader(dataset, batch_size=64)


def pinned_loader(dataset):  # recommended
    return torch.utils.data.DataLoader(dataset, batch_size=64, pin_memory=True)


# %%
# Check: the same bytes arrive
# ----------------------------
if device.type == "cuda":
    src = torch.randn(2**18)  # [256K] float32, 1 MiB
    for fn, data in ((copy_pageable, src), (copy_pinned, src.pin_memory()),
                     (pin_then_copy, src)):
        torch.testing.assert_close(fn(data).cpu(), src, rtol=0, atol=0)
    print("pageable, pinned and pin-then-copy deliver identical data")
    # The loaders' batches are the two kinds of memory the copies above start from.
    rows = src.view(256, 1024)  # a dataset of 256 rows
    for make_loader in (pageable_loader, pinned_loader):
        batch = next(iter(make_loader(rows)))  # [64, 1024]
        torch.testing.assert_close(batch, rows[:64], rtol=0, atol=0)
        print(f"{make_loader.__name__}: batches pinned: {batch.is_pinned()}")
        assert batch.is_pinned() == (make_loader is pinned_loader)

# %%
# Measurement
# -----------
# Copies from 64 KiB to 256 MiB. The timer synchronises before and after each block of
# calls, so a copy is timed until it has landed on the GPU. Speed-up = pageable copy time /
# pinned copy time, one ratio per round; the same for pinning every batch.
sizes_mib = [0.0625, 1, 16, 256]
pinned_gain, pin_each_time = [], []
if device.type == "cuda":
    for mib in sizes_mib:
        src = torch.ones(int(mib * 2**18))  # [mib MiB of float32], every page touched
        src_pinned = src.pin_memory()
        pinned_gain.append(compare_times(
            f"pinned vs pageable copy, {mib:g} MiB",
            {"pageable": lambda: copy_pageable(src),
             "pinned": lambda: copy_pinned(src_pinned)},
            threshold=1.5, device=device, x=mib, budget_s=2.0))
        pin_each_time.append(compare_times(
            f"pin every batch vs pageable copy, {mib:g} MiB",
            {"pageable": lambda: copy_pageable(src),
             "pin, then copy": lambda: pin_then_copy(src)},
            threshold=1.5, device=device, x=mib, budget_s=2.0))
        del src, src_pinned

# %%
# Where it pays
# -------------
# How many times faster each variant is than the plain copy from pageable memory, against
# the copy size.
if device.type == "cuda":
    fig = plot_ratios({"pinned": pinned_gain, "pin, then copy": pin_each_time},
                      xlabel="copy size (MiB)", title="Host-to-GPU copy, .to(device)",
                      ylabel="pageable copy time / variant time")

# %%
# Verdict
# -------
# "Much faster" is read as more than 1.5x: a size counts where the interval of the
# speed-up lies above 1.5. Pinning every batch is shown for the "when not to use it" advice;
# the claim is about copies from memory that is already pinned.
RULE = ("holds if copies from pinned memory are >1.5x faster than from pageable "
        "memory at every size (interval above 1.5); depends if at some sizes only; "
        "wrong if at none")
verdicts = {}
if device.type == "cuda":
    decision = decide(device, [
        ("holds", {"pinned copy": "all above"}),
        ("depends", {"pinned copy": "any above"}),
        ("wrong", {}),
    ], groups={"pinned copy": pinned_gain, "pin every batch": pin_each_time},
        key=pinned_gain[2])
    report(decision, RULE)
    verdicts[device.type] = decision
else:
    print("Verdict on CUDA: not measured (no CUDA device in this build)")
RESULT = {"rule": RULE, "verdicts": verdicts, "measurements": [], "skipped": skipped}

# %%
# When not to use it
# ------------------
# Pinned memory cannot be swapped out: pinning gigabytes starves the rest of the system. Do
# not call ``.pin_memory()`` on every batch in the training loop (that is an extra host copy,
# the "pin, then copy" line above); let the ``DataLoader`` pin in its background thread
# (``pin_memory=True``), or pin a reusable buffer once. ``non_blocking=True`` from pageable
# memory gives no overlap.

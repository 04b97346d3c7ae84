"""
``torch.cuda.empty_cache()`` every step: memory it frees, time it costs
=======================================================================

Training scripts often call ``torch.cuda.empty_cache()`` after every step, hoping to avoid
"CUDA out of memory". The function's documentation (claim S6-3) says what it can and cannot do:

    "empty_cache() doesn't increase the amount of GPU memory available for PyTorch. However,
    it may help reduce fragmentation of GPU memory in certain cases."

PyTorch's caching allocator keeps the memory of freed tensors (``memory_reserved()``) to hand it
to the next tensors without asking the driver again; ``empty_cache()`` returns the unused part
to the driver, where other programs (and ``nvidia-smi``) see it free. The next step then asks
the driver for it again. This tip trains MLPs of four widths with and without a per-step
``empty_cache()`` and measures three things: the memory reserved between steps (what
``empty_cache()`` hands back), the step's peak of reserved memory (what the step needs from
the GPU, and what an out-of-memory error is about), and the time per step. The claim is about the CUDA caching allocator: a CPU has none, and a machine
without CUDA measures nothing here.
"""
# sphinx_gallery_tips_claims = ["S6-3"]
# sphinx_gallery_tips_tags = ["allocator", "cuda", "training"]
# sphinx_gallery_tips_devices = ["cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_rules = ["PTT036"]
# sphinx_gallery_tips_min_torch = "1.10"
# sphinx_gallery_tips_takeaway = "empty_cache() every step hands cached memory back to the driver and re-allocates it next step; the step's peak stays the same, so it prevents no OOM."
# sphinx_gallery_tips_keywords = ["torch.cuda.empty_cache", "empty_cache", "caching allocator", "memory_reserved", "nvidia-smi", "free GPU memory", "CUDA out of memory", "release GPU memory", "clear CUDA cache"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/generated/torch.cuda.memory.empty_cache.html", "https://docs.pytorch.org/docs/stable/notes/cuda.html#memory-management", "https://docs.pytorch.org/docs/stable/generated/torch.cuda.memory_reserved.html"]
# sphinx_gallery_tips_related = ["tip_memory_allocated", "tip_oom_retry", "tip_expandable_segments"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). Memory is
# measured, not computed: the CUDA caching allocator's own counters. Each comparison pairs the
# anti-pattern with the recommended pattern, one pair per round, as a ratio (here each memory
# comparison is one round, one model width); speed comparisons time both in alternating
# rounds with ``torch.utils.benchmark``.
# The interval is a ~95% confidence interval for the median (with 5 rounds or fewer, their
# whole range). A verdict is the first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import (compare_times, compare_values, decide, plot_ratios,
                            plot_series, report)


# %%
# Setup
# -----
# Four-layer MLPs trained with SGD. The batch and the widths grow with the GPU's streaming
# multiprocessors (a batch of 1,056 and widths of 512 to 4,096 on a 132-SM H100), so that the
# largest step is milliseconds of GPU work and its weights and gradients are hundreds of MiB.
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
on_cuda = device.type == "cuda"
print(f"device: {device}, torch {torch.__version__}")
skipped = []
if on_cuda:
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    batch = 8 * sms
    base = max(64, 4 * sms // 64 * 64)
    widths = [base, 2 * base, 4 * base, 8 * base]
    print(f"batch {batch}, widths {widths} ({sms} SMs)")
else:
    skipped.append("all measurements: the CUDA caching allocator needs a CUDA device")
    print("Skipped:", skipped[-1])


def make_model(width):
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).to(device)


def train_step(model, optimizer, x):
    optimizer.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
def step_then_empty_cache(model, optimizer, x):  # anti-pattern
    train_step(model, optimizer, x)
    torch.cuda.empty_cache()  # hands back cached blocks; the next step allocates again


def step(model, optimizer, x):  # recommended: let the allocator keep its cache
    train_step(model, optimizer, x)


# %%
# Check: the same training
# ------------------------
# ``empty_cache()`` changes where memory comes from, not what is computed: two identical
# models, one step each, the same weights after it.
if on_cuda:
    x = torch.randn(batch, widths[0], device=device)  # [batch, features]
    models = [make_model(widths[0]) for _ in range(2)]
    for model, fn in zip(models, (step_then_empty_cache, step)):
        fn(model, torch.optim.SGD(model.parameters(), lr=1e-3), x)
    for p, q in zip(*(m.parameters() for m in models)):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    print("the same weights after a step with and without empty_cache()")
    del models

# %%
# Measurement
# -----------
# Memory, per width: one warm-up step, then one step measured with
# ``reset_peak_memory_stats()`` before it: the peak of memory the allocator reserved from the
# GPU during the step (``max_memory_reserved()``), which ``empty_cache()`` lowers only where
# cached blocks of the wrong sizes made the step reserve more (fragmentation), and
# ``memory_reserved()`` after it, between steps, which it lowers by what it hands back. Time: time per step with / without ``empty_cache()``, one ratio per round;
# ``torch.utils.benchmark`` synchronises CUDA around the timed calls. The variants alternate,
# so the first step of each round without ``empty_cache()`` finds the cache emptied by the
# other variant and allocates too: if anything, the ratio understates the cost.
peaks, reserved, lowered_peak, handed_back, cost = {}, {}, [], [], []
free_segments = []  # without empty_cache: releasable bytes between steps


def measure(fn, model, optimizer, x):
    fn(model, optimizer, x)  # warm-up: from here on gradients and workspaces exist
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn(model, optimizer, x)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_reserved(), torch.cuda.memory_reserved(), releasable()


def releasable():
    """Bytes in cached segments that hold no tensor: what empty_cache() can release
    (a segment with any live block stays); None where no snapshot can be read."""
    try:
        segments = torch.cuda.memory_snapshot()
    except (RuntimeError, AttributeError):
        return None
    return sum(s["total_size"] for s in segments if s["allocated_size"] == 0)


if on_cuda:
    for width in widths:
        model = make_model(width)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(batch, width, device=device)  # [batch, features]
        for name, fn in (("empty_cache every step", step_then_empty_cache),
                         ("no empty_cache", step)):
            torch.cuda.empty_cache()  # both start from the same allocator state
            peak, held, free = measure(fn, model, optimizer, x)
            peaks.setdefault(name, []).append(peak / 2**20)
            reserved.setdefault(name, []).append(held / 2**20)
            if fn is step:
                free_segments.append(free)
        lowered_peak.append(compare_values(
            f"step's peak reserved, without / with empty_cache, width {width}",
            {"no empty_cache": [peaks["no empty_cache"][-1]],
             "empty_cache every step": [peaks["empty_cache every step"][-1]]},
            threshold=1.01, device=device, metric="memory", unit="MiB", x=width))
        handed_back.append(compare_values(
            f"reserved between steps, without / with empty_cache, width {width}",
            {"no empty_cache": [reserved["no empty_cache"][-1]],
             "empty_cache every step": [reserved["empty_cache every step"][-1]]},
            threshold=1.01, device=device, metric="memory", unit="MiB", x=width))
        cost.append(compare_times(
            f"time with / without empty_cache, width {width}",
            {"empty_cache every step":
                 lambda: step_then_empty_cache(model, optimizer, x),
             "no empty_cache": lambda: step(model, optimizer, x)},
            threshold=1.05, device=device, x=width, budget_s=1.0))
        del model, optimizer, x
    print(f"{'width':>6} {'peak, no e_c':>13} {'peak, e_c':>10} "
          f"{'reserved, no e_c':>17} {'reserved, e_c':>14}  (MiB)")
    for i, width in enumerate(widths):
        print(f"{width:>6} {peaks['no empty_cache'][i]:>13.1f} "
              f"{peaks['empty_cache every step'][i]:>10.1f} "
              f"{reserved['no empty_cache'][i]:>17.1f} "
              f"{reserved['empty_cache every step'][i]:>14.1f}")

# %%
# What it frees, what it costs
# ----------------------------
# First the memory: the step's peak of reserved memory, and the memory reserved between steps,
# with and without ``empty_cache()``. Then the time per step with it over the time without:
# above 1.0 it slows training.
if on_cuda:
    fig = plot_series(
        {f"{kind}, {name}": (widths, values[name])
         for kind, values in (("step peak", peaks),
                              ("reserved between steps", reserved))
         for name in ("no empty_cache", "empty_cache every step")},
        xlabel="MLP width (log scale)", ylabel="memory (MiB)",
        title=f"One training step, 4-layer MLP, batch {batch}", device=device,
        logx=True)
    fig = plot_ratios({"empty_cache() every step": cost},
                      xlabel="MLP width (log scale)",
                      ylabel="time with / time without",
                      title=f"Training step time, 4-layer MLP, batch {batch}")

# %%
# Verdict
# -------
# Decided on CUDA only, on the two quantities ``empty_cache()`` can change. It hands
# memory back when the memory reserved between steps is more than 1% lower with it (ratio
# without / with above 1.01), at the largest width. It gives the step more room when the
# step's peak of reserved memory is more than 1% lower with it at some width: what the
# claim's second sentence allows "in certain cases" (fragmentation). The claim holds if it
# hands memory back and the step's peak is lowered at no width: the step needs as much from
# the GPU as before, so it gains no room against an out-of-memory error. It depends (on the
# pattern of allocations) if the peak is lowered somewhere, and it is wrong if it hands
# nothing back although the cache held segments with no tensor in them between steps (the
# claim says it returns cached, unused memory to the driver; ``memory_snapshot()`` shows
# the segments); a cache with no such segment has nothing to hand back: that depends too. These steps allocate
# the same sizes every time, not the changing sizes that fragment the cache (for those, see
# the tips on expandable segments and on preallocation). The time is shown beside it. The
# key figure is the quantity that decided: the memory handed back at the largest width, or
# the width whose peak was lowered most.
RULE = ("CUDA only: holds if empty_cache() every step lowers the memory reserved "
        "between steps by more than 1% at the largest width (ratio without/with above "
        "1.01) and the step's peak reserved memory by more than 1% at no width; "
        "depends if it lowers that peak at some width (fragmentation), or the "
        "cache held no segment free of tensors between steps; wrong if it held one "
        "(at the largest width) and empty_cache() does not lower what is reserved")
verdicts = {}
if on_cuda:
    lowered = [c for c in lowered_peak if c["outcome"] == "above"]
    deciding = (max(lowered, key=lambda c: c["median"]) if lowered
                else handed_back[-1])
    facts = {"segments free of tensors between steps, largest width (bytes)":
             free_segments[-1],
             "the cache held a free segment": bool(free_segments[-1])}
    decision = decide(device, [("wrong", {"the cache held a free segment": True,
                                          "handed back, largest width": "none above"}),
                               ("holds", {"handed back, largest width": "all above",
                                          "peak lowered": "none above"}),
                               ("depends", {})],
                      groups={"handed back, largest width": handed_back[-1:],
                              "handed back": handed_back, "peak lowered": lowered_peak,
                              "time cost": cost},
                      facts=facts, key=deciding, about="host")
    report(decision, RULE)
    verdicts[device.type] = decision
else:
    print("Verdict on CUDA: not measured (no CUDA device in this build); none on CPU")
RESULT = {"rule": RULE, "verdicts": verdicts, "measurements": [], "skipped": skipped}

# %%
# When not to use it
# ------------------
# Do not call it every step: the allocator reuses its cache, and when a request does not fit
# it frees the unused cached blocks itself and retries before it reports out of memory
# (``memory_stats()["num_alloc_retries"]`` counts those). Call it where another program needs
# the memory back: before starting a second process on the same GPU, after deleting a large
# model you will not reload, or between the phases of a job whose tensor sizes change
# completely. To lower the step's peak itself, see the tips on activation checkpointing and
# mixed precision; for fragmentation, the one on expandable segments.

"""
Hidden CPU-GPU synchronisation points
=====================================

The article lists operations that make the CPU wait for the GPU: ``print(cuda_tensor)``,
``cuda_tensor.item()``, ``tensor.cuda()``, ``cuda_tensor.cpu()`` and the equivalent
``.to(device)`` calls, ``cuda_tensor.nonzero()`` and ``if (cuda_tensor != 0).all()``
(claim S0-7):

    "Avoiding these when unnecessary lets the CPU run ahead and add more operations to the
    accelerator (GPU) queue."

CUDA runs kernels asynchronously: Python queues work and moves on. Anything that needs a
*value* from the GPU on the host (printing, ``.item()``, a Python ``if`` on a tensor, a copy
to the CPU) or a *shape* that depends on GPU data (``nonzero``, boolean-mask indexing) must
wait until the queue has drained. The host-to-device direction is different: no GPU value is
read, but a blocking copy (a plain ``cpu_tensor.cuda()``) waits until the stream has reached
it, and per NVIDIA's notes on the CUDA runtime a copy from *pageable* memory may wait even
when asked not to; from pinned memory with ``non_blocking=True`` it does not wait. This tip asks PyTorch which of the article's calls
synchronise (``torch.cuda.set_sync_debug_mode("warn")``), then measures what a sync costs as
the GPU work between two syncs grows from less than the host needs to queue a step to much
more. The claim is about CUDA: a machine without a GPU decides nothing.
"""
# sphinx_gallery_tips_claims = ["S0-7"]
# sphinx_gallery_tips_tags = ["sync", "cuda", "training"]
# sphinx_gallery_tips_devices = ["cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.10"
# sphinx_gallery_tips_takeaway = "print, .item(), .cpu(), pageable .cuda(), nonzero and if-on-tensor all sync; each sync costs most when little GPU work runs between two of them."
# sphinx_gallery_tips_keywords = ["sync", "synchronization", "item", "set_sync_debug_mode", "nonzero", "count_nonzero", "print tensor", "cpu gpu sync"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.cuda.set_sync_debug_mode.html", "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization"]
# sphinx_gallery_tips_rules = ["PTT011", "PTT039", "PTT040"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, anti-pattern time / recommended time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import calibrate, compare_times, decide, plot_ratios, report


# %%
# Setup
# -----
# One CPU thread: the host side is one Python loop, and one thread keeps timings steady on a
# busy machine.
import warnings

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")
skipped = []
if device.type != "cuda":
    skipped.append("sync detection and sync cost: the claim is about CUDA, none here")
    print("Skipped:", skipped[-1])

# %%
# Why ``nonzero`` must wait: its output shape depends on the data
# ---------------------------------------------------------------
# Two tensors of one shape give ``nonzero`` results of different shapes, so the host cannot
# size the result (or anything after it) until the values exist. ``count_nonzero`` and
# ``torch.where`` have fixed output shapes and can stay queued on the device. (This holds on
# any device; only on a GPU does it mean waiting.)
a = torch.tensor([0.0, 1.0, 0.0, 2.0], device=device)  # [4]
b = torch.tensor([3.0, 1.0, 4.0, 2.0], device=device)  # [4]
print("nonzero shapes:", tuple(a.nonzero().shape), "vs", tuple(b.nonzero().shape))
print("count_nonzero shapes:", tuple(torch.count_nonzero(a).shape), "vs",
      tuple(torch.count_nonzero(b).shape))
print("where shapes:", tuple(torch.where(a > 0, a, torch.zeros_like(a)).shape), "vs",
      tuple(torch.where(b > 0, b, torch.zeros_like(b)).shape))

# %%
# Which of the article's calls synchronise
# ----------------------------------------
# In "warn" mode PyTorch emits a warning whenever an op synchronises with the device. Each
# call runs on its own, starting from an empty queue, in its own ``catch_warnings`` block.
# The last three lines are calls that should not synchronise, for contrast.
detected = {}
if device.type == "cuda":
    t = torch.randn(1000, device=device)  # [1000] on the GPU
    host = torch.randn(1000)              # [1000] in pageable host memory
    host_pinned = host.pin_memory()       # [1000] page-locked

    def branch_on(condition):
        if condition:  # Python needs the value on the host
            return 1
        return 0

    article = {
        "print(cuda_tensor)": lambda: print(t[:3]),
        "cuda_tensor.item()": lambda: t[0].item(),
        "tensor.cuda()": lambda: host.cuda(),
        "cuda_tensor.cpu()": lambda: t.cpu(),
        "tensor.to(device)": lambda: host.to(device),
        "cuda_tensor.to('cpu')": lambda: t.to("cpu"),
        "cuda_tensor.nonzero()": lambda: t.nonzero(),
        "if (cuda_tensor != 0).all():": lambda: branch_on((t != 0).all()),
    }
    contrast = {
        "pinned.to(device, non_blocking=True)":
            lambda: host_pinned.to(device, non_blocking=True),
        "torch.count_nonzero(cuda_tensor)": lambda: torch.count_nonzero(t),
        "cuda_tensor.sum()": lambda: t.sum(),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the mode's one-off notice
        torch.cuda.set_sync_debug_mode("warn")
    try:
        for name, fn in {**article, **contrast}.items():
            torch.cuda.synchronize()  # start each call with an empty queue
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fn()
            detected[name] = any("synchroniz" in str(w.message) for w in caught)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for name, synced in detected.items():
        print(f"  {name:40s} {'syncs' if synced else 'no sync reported'}")

# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# A loop of ``STEPS`` steps; each step is an ``[n, n] @ [n, n]`` float32 matmul and a
# ``tanh``, and logs the mean activation. The anti-pattern reads it at once with ``.item()``;
# the fix adds it to a running total on the device and reads that once at the end. Both
# compute the same number from the same kernels.
STEPS = 8


def log_now(x, w):
    total, h = 0.0, x
    for _ in range(STEPS):
        h = torch.tanh(h @ w)
        total += h.mean().item()  # the host waits here for the queued steps
    return total


def log_on_device(x, w):
    running, h = torch.zeros((), device=device), x
    for _ in range(STEPS):
        h = torch.tanh(h @ w)
        running += h.mean()  # stays queued on the device
    return running.item()  # one wait, at the end


def operands(n):
    w = torch.randn(n, n, device=device) / n**0.5  # [n, n]
    return torch.randn(n, n, device=device), w      # x: [n, n]


# %%
# Check: same number
# ------------------
if device.type == "cuda":
    x, w = operands(256)
    torch.testing.assert_close(log_now(x, w), log_on_device(x, w), rtol=1e-5, atol=1e-5)
    print("reading every step and reading once give the same total")

# %%
# Measurement
# -----------
# What a sync costs depends on how long the GPU works between two of them against how long
# the host takes to queue that work. While the host waits, the GPU has finished; while the
# host then queues the next step, the GPU idles. So the sizes come from this GPU's own rates,
# measured at the start (``calibrate``): the host's time to launch one kernel, and the float32
# matmul rate. A step queues about 4 kernels (matmul, tanh, mean, then ``.item()`` or an add),
# so ``n`` is chosen for each step's matmul to take from a quarter of those 4 launch times to
# 64 times them, at that rate. The timer synchronises before and after each block of calls,
# so each variant is timed until its GPU work is done.
sync_cost, sides = [], {}
if device.type == "cuda":
    calib = calibrate(device)
    host_step = 4 * calib["launch_s"]  # seconds the host needs to queue one step
    for ratio in [0.25, 1, 4, 16, 64]:
        flops = ratio * host_step * calib["matmul_float32"]  # one step's matmul
        sides.setdefault(max(64, round((flops / 2) ** (1 / 3) / 64) * 64), ratio)
    for n in sides:
        x, w = operands(n)
        log_now(x, w)  # warm-up: allocator and cuBLAS
        t = 2 * n**3 / calib["matmul_float32"]
        print(f"n = {n}: a step's matmul ~{t * 1e6:.3g} us at the calibrated rate, "
              f"{t / host_step:.2g}x the host's time to queue a step")
        sync_cost.append(compare_times(
            f".item() every step vs on the device, [{n}, {n}] matmuls",
            {".item()": lambda: log_now(x, w),
             "on device": lambda: log_on_device(x, w)},
            threshold=1.10, device=device, x=n, budget_s=1.5,
            work={"flops": STEPS * 2 * n**3, "limit": "matmul_float32"}))

# %%
# Where it pays
# -------------
# How much slower the loop runs when each step's log is read at once than when it stays on
# the device, against the size of each step's matmul (the GPU work between two syncs).
if device.type == "cuda":
    fig = plot_ratios({".item() every step vs on the device": sync_cost},
                      xlabel="n: each step is an [n, n] @ [n, n] matmul (log scale)",
                      title=f"{STEPS} steps of a float32 matmul and tanh, a log each",
                      ylabel="time with .item() / time without")

# %%
# Verdict
# -------
# Two parts: that the article's calls synchronise (each checked above), and that avoiding
# syncs lets the work finish sooner. A sync *costs* where the interval of the slow-down
# lies above 1.10. What a sync costs depends on the GPU work per step against the host's
# time to queue it, so one size cannot settle the advice: it holds as given ("avoid syncs")
# only if a sync costs at every work per step measured, from a quarter of the host's queue
# time to 64 times it; where it costs at some and not at others, it depends on the work per
# step, and the figure shows where. The claim is about the host: a sync makes it wait, and
# while it waits it queues nothing. So every size counts, the ones the host's launches bound
# too (``about="host"``): that is where a sync is expected to cost most.
RULE = ("holds if every article call warns under set_sync_debug_mode('warn') and "
        "reading each step's log with .item() slows the loop >10% at every size of "
        "the GPU work per step; depends if it slows it at some sizes only (on the "
        "work per step), or if the calls sync but no size slows; wrong if no call "
        "syncs and no size slows. The claim is about the host waiting: host-bound "
        "sizes count")
verdicts = {}
if device.type == "cuda":
    warned = sum(detected[name] for name in article)
    facts = {"article calls that sync": f"{warned} of {len(article)}",
             "every article call syncs": warned == len(article)}
    decision = decide(device, [
        ("holds", {"every article call syncs": True, "sync cost": "all above"}),
        ("depends", {"sync cost": "any above"}),
        ("depends", {"every article call syncs": True}),
        ("wrong", {}),
    ], groups={"sync cost": sync_cost}, facts=facts,
        key=next((c for c, r in zip(sync_cost, sides.values()) if r >= 1),
                 sync_cost[-1]), about="host")
    report(decision, RULE)
    verdicts[device.type] = decision
else:
    print("Verdict on CUDA: not measured (no CUDA device in this build)")
RESULT = {"rule": RULE, "verdicts": verdicts, "measurements": [], "skipped": skipped}

# %%
# When not to use it
# ------------------
# A sync is not a bug: logging a loss every N steps, early stopping, or data-dependent
# control flow needs one. What costs is a sync with little GPU work between it and the next
# (see the figure): keep them out of the per-step path (log every 100 steps, accumulate on
# the device), and use ``torch.cuda.set_sync_debug_mode("warn")`` while profiling to find the
# ones you did not mean to have. It is a prototype feature and does not report every sync.

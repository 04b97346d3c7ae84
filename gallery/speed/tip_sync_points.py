"""
Hidden CPU-GPU synchronisation points
=====================================

The article lists operations that make the CPU wait for the GPU: ``print(cuda_tensor)``,
``.item()``, ``.cpu()``, ``.cuda()``/``.to(device)``, ``.nonzero()`` and
``if (cuda_tensor != 0).all()`` (claim S0-7):

    "Avoiding these when unnecessary lets the CPU run ahead and add more operations to the
    accelerator (GPU) queue."

CUDA runs kernels asynchronously: Python queues work and moves on. Anything that needs a *value*
from the GPU on the host (printing, ``.item()``, a Python ``if`` on a tensor, copying to CPU) or a
*shape* that depends on GPU data (``nonzero``, boolean-mask indexing) must wait until the queue has
drained. The host-to-device direction is different: no GPU value is read, but per NVIDIA's CUDA
runtime notes a copy from *pageable* host memory performs a stream sync before it starts, so a
plain ``cpu_tensor.cuda()`` also waits for queued work; from pinned memory with
``non_blocking=True`` it does not. On CUDA this tip detects each sync with
``torch.cuda.set_sync_debug_mode("warn")`` and times a loop with and without a per-step
``.item()``; on CPU there is no device queue, so it shows the data-dependent shapes behind the
``nonzero`` case and what the loop costs there.
"""
# sphinx_gallery_tips_claims = ["S0-7"]
# sphinx_gallery_tips_tags = ["sync", "cuda", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.10"
# sphinx_gallery_tips_takeaway = "item(), print, .cpu(), nonzero and if-on-tensor make the CPU wait for the GPU; keep them out of the per-step loop."
# sphinx_gallery_tips_keywords = ["sync", "synchronization", "item", "set_sync_debug_mode", "nonzero", "count_nonzero", "print tensor", "cpu gpu sync"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.cuda.set_sync_debug_mode.html", "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization"]

# %%
# Setup
# -----
import statistics
import warnings

import torch
import torch.utils.benchmark as benchmark

torch.manual_seed(0)
# One thread: on a busy shared 2-core machine a two-thread op can stall a whole scheduler slice
# waiting for its second thread, which would swamp the small per-step costs measured here.
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")
skipped = []

# %%
# Why ``nonzero`` must wait: its output shape depends on the data
# ---------------------------------------------------------------
# Two tensors of the same shape give ``nonzero`` results of different shapes, so the host cannot
# size the result (or anything after it) until the values exist. ``count_nonzero`` and
# ``torch.where`` have fixed output shapes and can stay queued on the device.
a = torch.tensor([0.0, 1.0, 0.0, 2.0], device=device)  # [4]
b = torch.tensor([3.0, 1.0, 4.0, 2.0], device=device)  # [4]
print("nonzero shapes:", tuple(a.nonzero().shape), "vs", tuple(b.nonzero().shape), "(data-dependent)")
print("count_nonzero shapes:", tuple(torch.count_nonzero(a).shape), "vs", tuple(torch.count_nonzero(b).shape))
print("a[a > 0] shape:", tuple(a[a > 0].shape), "| torch.where(a > 0, a, 0) shape:",
      tuple(torch.where(a > 0, a, torch.zeros_like(a)).shape))
data_dependent = a.nonzero().shape != b.nonzero().shape
assert data_dependent and torch.count_nonzero(a).shape == torch.count_nonzero(b).shape

# %%
# Detecting each synchronisation (CUDA)
# -------------------------------------
# In "warn" mode PyTorch emits a UserWarning whenever an op synchronises with the device. Each
# expression runs in its own ``catch_warnings`` block; pageable and pinned host-to-device copies
# are listed separately from the article's device-to-host cases.
detected = {}
if torch.cuda.is_available():
    t = torch.randn(1000, device=device)          # [1000] on the GPU
    host = torch.randn(1000)                      # [1000] pageable host memory
    host_pinned = host.pin_memory()               # [1000] page-locked

    def flag_if(cond):
        if cond:
            return 1
        return 0

    expressions = {
        "print(cuda_tensor)": lambda: print(t[:3]),
        "t.item()": lambda: t[0].item(),
        "t.cpu()": lambda: t.cpu(),
        "t.to('cpu')": lambda: t.to("cpu"),
        "t.nonzero()": lambda: t.nonzero(),
        "if (t != 0).all():": lambda: flag_if((t != 0).all()),
        "cpu_tensor.cuda() (pageable)": lambda: host.cuda(),
        "cpu_tensor.to(device) (pageable)": lambda: host.to(device),
        "pinned.to(device, non_blocking=True)": lambda: host_pinned.to(device, non_blocking=True),
        "torch.count_nonzero(t)": lambda: torch.count_nonzero(t),
        "t.sum() (stays on GPU)": lambda: t.sum(),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the one-off "prototype feature" notice
        torch.cuda.set_sync_debug_mode("warn")
    try:
        for name, fn in expressions.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.cuda.synchronize()  # start each case with an empty queue
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fn()
            detected[name] = any("synchroniz" in str(w.message) for w in caught)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for name, synced in detected.items():
        print(f"  {name:40s} {'SYNC' if synced else 'no sync detected'}")
else:
    msg = "sync detection with torch.cuda.set_sync_debug_mode: needs CUDA (no CUDA device in this build)"
    print("Skipped:", msg)
    skipped.append(msg)

# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# A loop of small steps. The anti-pattern reads the loss every step with ``.item()``; the fix
# accumulates it on the device and reads it once at the end.
w = torch.randn(256, 256, device=device) / 16  # [256, 256]
x = torch.randn(64, 256, device=device)        # [64, 256]
STEPS = 20


def loop_item_every_step():
    total = 0.0
    h = x
    for _ in range(STEPS):
        h = torch.tanh(h @ w)
        total += h.mean().item()               # host waits for the GPU each step
    return total


def loop_item_once():
    total = torch.zeros((), device=device)
    h = x
    for _ in range(STEPS):
        h = torch.tanh(h @ w)
        total += h.mean()                      # stays queued on the device
    return total.item()                        # one wait at the end


# %%
# Check: same number
# ------------------
torch.testing.assert_close(torch.tensor(loop_item_every_step()), torch.tensor(loop_item_once()),
                           rtol=1e-5, atol=1e-5)
print("both loops give the same total")

# %%
# Measurement
# -----------
# ``torch.utils.benchmark`` synchronises CUDA around each timed block, so both variants are timed
# until all their GPU work has finished. Speed-up = per-step-item time / read-once time.


def time_interleaved(variants, label, description, rounds=5, min_run_time=0.05):
    runs = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            timer = benchmark.Timer(
                "fn()", globals={"fn": fn}, label=label, sub_label=name,
                description=description, num_threads=torch.get_num_threads(),
            )
            runs[name].append(timer.blocked_autorange(min_run_time=min_run_time))
    return runs


runs = time_interleaved({".item() every step": loop_item_every_step, ".item() once": loop_item_once},
                        label=f"{STEPS}-step loop", description=device.type)
ratios = [e.median / o.median for e, o in zip(runs[".item() every step"], runs[".item() once"])]
compare = benchmark.Compare(runs[".item() every step"] + runs[".item() once"])
compare.trim_significant_figures()
compare.print()
speedup = statistics.median(ratios)
print(f"speed-up from reading once: {speedup:.3f}x [{min(ratios):.3f} .. {max(ratios):.3f}]")

# %%
# Verdict
# -------
# On CUDA the claim holds if every operation the article names (the device-to-host six) was
# detected as a sync and dropping the per-step ``.item()`` saved more than 5%. On CPU there is no
# device queue to wait for and no detector, so the verdict can only be "depends" (on a GPU); it
# reports what the CPU run did show.
RULE = ("CUDA: holds if all six device-to-host cases warn under set_sync_debug_mode('warn') and "
        "reading .item() once is >1.05x faster than every step; depends if only part of that; "
        "wrong if none of the cases warns. CPU: depends (syncs need a device queue)")
article_cases = ["print(cuda_tensor)", "t.item()", "t.cpu()", "t.to('cpu')", "t.nonzero()", "if (t != 0).all():"]
if detected:
    n_sync = sum(detected[c] for c in article_cases)
    if n_sync == len(article_cases) and speedup > 1.05:
        verdict = "holds"
    elif n_sync == 0:
        verdict = "wrong"
    else:
        verdict = "depends"
    reason = (f"{n_sync}/{len(article_cases)} named cases synced; pageable H2D synced: "
              f"{detected['cpu_tensor.cuda() (pageable)']}; pinned non_blocking H2D synced: "
              f"{detected['pinned.to(device, non_blocking=True)']}; per-step .item() cost {speedup:.2f}x")
else:
    verdict = "depends"
    reason = (f"no CUDA here: nonzero gave shapes {tuple(a.nonzero().shape)} and {tuple(b.nonzero().shape)} "
              f"for inputs of one shape, and on CPU the per-step .item() loop took {speedup:.2f}x the "
              f"read-once loop's time, range "
              f"[{min(ratios):.2f} .. {max(ratios):.2f}]: on CPU .item() is a plain read, not a wait")
print(f"Verdict: {verdict}. {reason}.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": f"speed-up from one .item() ({device.type})", "value": speedup,
            "low": min(ratios), "high": max(ratios), "unit": "x"},
    "measurements": [
        {"variant": name, "metric": f"time per {STEPS}-step loop", "unit": "us",
         "value": statistics.median([m.median * 1e6 for m in ms]),
         "spread": (max(m.median for m in ms) - min(m.median for m in ms)) * 1e6}
        for name, ms in runs.items()
    ],
    "skipped": skipped,
}

# %%
# When not to use it
# ------------------
# A sync is not a bug: logging a loss every N steps, early stopping, or data-dependent control
# flow needs one. Keep them out of the per-step path (log every 100 steps, accumulate on the
# device), and use ``torch.cuda.set_sync_debug_mode("warn")`` while profiling to find the ones
# you did not mean to have. Note it is a prototype: not every sync is reported.

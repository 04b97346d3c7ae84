"""
``to(device, non_blocking=True)``: what it overlaps, and what it needs
======================================================================

The article recommends asynchronous copies (claim S1-4):

    "Use `tensor.to(non_blocking=True)` when it’s applicable to overlap data transfers and kernel
    execution."

What ``non_blocking=True`` does is return control to Python before a host<->device copy has
finished. Per NVIDIA's CUDA runtime notes, that only happens when the host side is *pinned*
(page-locked): a copy from pageable memory is staged by the driver and synchronises first. And a
copy issued on the same CUDA stream as the kernels still runs after them on the GPU; copy and
compute only run *at the same time* when the copy sits on another stream. This tip times the
variants on CUDA, shows that reading a non-blocking GPU->CPU copy before synchronising can give
stale data, and on CPU shows that the flag does nothing there (there is no pinned memory to use).
"""
# sphinx_gallery_tips_claims = ["S1-4"]
# sphinx_gallery_tips_tags = ["data-loading", "device", "sync", "cuda"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.0"
# sphinx_gallery_tips_takeaway = "non_blocking=True needs pinned memory to be asynchronous and a side stream to truly overlap compute; on CPU it is a no-op."
# sphinx_gallery_tips_keywords = ["non_blocking", "pin_memory", "pinned memory", "asynchronous copy", "cuda streams", "host to device", "overlap"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html", "https://docs.nvidia.com/cuda/cuda-runtime-api/api-sync-behavior.html"]

# %%
# Setup
# -----
import statistics

import torch
import torch.utils.benchmark as benchmark

torch.manual_seed(0)
# One thread: on a busy shared 2-core machine a two-thread copy can stall a whole scheduler
# slice waiting for its second thread, which would swamp a ~1.0 ratio.
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")


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


def summarise(runs, base, other):
    """Per-round speed-up of ``other`` over ``base``: median, min, max."""
    r = [b.median / o.median for b, o in zip(runs[base], runs[other])]
    return statistics.median(r), min(r), max(r)


skipped, measurements, per_call = [], [], {}

# %%
# On any build: pinned memory and the flag on CPU
# -----------------------------------------------
# Pinning needs an accelerator's allocator; a CPU-only build refuses. A CPU-to-CPU ``.to`` with
# the flag returns the tensor itself, and ``copy_`` with the flag is an ordinary copy.
x_cpu = torch.randn(1 << 20)  # [1M] float32, 4 MiB
try:
    pinned_ok = x_cpu.pin_memory().is_pinned()
except (RuntimeError, AssertionError) as err:  # the error type has varied across CPU builds
    pinned_ok = False
    print("pin_memory() raised:", str(err).splitlines()[0])
print("pinned memory available:", pinned_ok)
print("x.to('cpu', non_blocking=True) is x:", x_cpu.to("cpu", non_blocking=True) is x_cpu)

dst = torch.empty_like(x_cpu)
runs = time_interleaved(
    {"copy_ blocking": lambda: dst.copy_(x_cpu), "copy_ non_blocking": lambda: dst.copy_(x_cpu, non_blocking=True)},
    label="CPU -> CPU copy, 4 MiB", description="cpu",
)
cpu_ratio = summarise(runs, "copy_ blocking", "copy_ non_blocking")
measurements += runs["copy_ blocking"] + runs["copy_ non_blocking"]
for name, ms in runs.items():
    per_call[name + ", CPU->CPU"] = [m.median * 1e6 for m in ms]
print(f"CPU copy, non_blocking speed-up: {cpu_ratio[0]:.3f}x [{cpu_ratio[1]:.3f} .. {cpu_ratio[2]:.3f}]")

# %%
# The anti-pattern and the recommended patterns (CUDA)
# ----------------------------------------------------
# Each call queues one compute kernel (a matmul) and one 64 MiB host-to-device copy, then the
# timer synchronises. Variants:
#
# * pageable, blocking: ``x.to(dev)`` from ordinary memory (the driver syncs the stream first);
# * pinned, blocking: ``x_pinned.to(dev)``;
# * pinned, non_blocking: ``x_pinned.to(dev, non_blocking=True)`` on the same stream;
# * pinned, non_blocking, side stream: the copy on its own stream, so it can overlap the matmul.
overlap = stream_gain = None
if torch.cuda.is_available():
    big = torch.randn(16 << 20)                     # [16M] float32 = 64 MiB, pageable
    big_pinned = big.pin_memory()                   # same data, page-locked
    m = torch.randn(4096, 4096, device=device)      # [4096, 4096]: a few ms of matmul
    side = torch.cuda.Stream()

    def pageable_blocking():
        y = m @ m
        return y, big.to(device)

    def pinned_blocking():
        y = m @ m
        return y, big_pinned.to(device)

    def pinned_non_blocking():
        y = m @ m
        return y, big_pinned.to(device, non_blocking=True)

    def pinned_side_stream():
        y = m @ m
        with torch.cuda.stream(side):
            xb = big_pinned.to(device, non_blocking=True)
        torch.cuda.current_stream().wait_stream(side)  # later kernels must see the copied data
        xb.record_stream(torch.cuda.current_stream())
        return y, xb

    variants = {"pageable, blocking": pageable_blocking, "pinned, blocking": pinned_blocking,
                "pinned, non_blocking": pinned_non_blocking, "pinned, non_blocking, side stream": pinned_side_stream}
    for fn in variants.values():
        fn()
    torch.cuda.synchronize()
    # Check: every variant delivers the same data to the GPU.
    for fn in variants.values():
        torch.testing.assert_close(fn()[1].cpu(), big, rtol=0, atol=0)
    runs = time_interleaved(variants, label="matmul + 64 MiB H2D copy", description="cuda")
    for name, ms in runs.items():
        measurements += ms
        per_call[name + ", H2D"] = [t.median * 1e6 for t in ms]
    overlap = summarise(runs, "pinned, blocking", "pinned, non_blocking")
    stream_gain = summarise(runs, "pinned, blocking", "pinned, non_blocking, side stream")
    pin_gain = summarise(runs, "pageable, blocking", "pinned, blocking")
    print(f"pinning alone:              {pin_gain[0]:.3f}x [{pin_gain[1]:.3f} .. {pin_gain[2]:.3f}]")
    print(f"non_blocking, same stream:  {overlap[0]:.3f}x [{overlap[1]:.3f} .. {overlap[2]:.3f}]")
    print(f"non_blocking, side stream:  {stream_gain[0]:.3f}x [{stream_gain[1]:.3f} .. {stream_gain[2]:.3f}]")

    # %%
    # The hazard: a non-blocking GPU->CPU copy read before synchronising
    # ------------------------------------------------------------------
    # The copy waits behind queued kernels; Python does not. Reading the destination at once can
    # see what was there before (zeros), not the GPU's values (twos).
    src = torch.zeros(1 << 20, device=device)       # [1M]
    host = torch.zeros(1 << 20, pin_memory=True)    # [1M], pinned destination
    for _ in range(20):
        m = m @ m / 4096.0                          # keeps the GPU busy for tens of ms
    src.fill_(2.0)
    host.copy_(src, non_blocking=True)
    early = host[-1].item()                         # a host read: no sync with the GPU
    torch.cuda.synchronize()
    late = host[-1].item()
    print(f"read before synchronize: {early}, after: {late} -> stale read observed: {early != late}")
else:
    msg = "pinned vs pageable H2D copy timing and the stale-read demo: need CUDA (no CUDA device in this build)"
    print("Skipped:", msg)
    skipped.append(msg)

if measurements:
    compare = benchmark.Compare(measurements)
    compare.trim_significant_figures()
    compare.print()

# %%
# Verdict
# -------
# On CUDA the claim is that the flag itself buys overlap. It holds if a non-blocking copy on the
# same stream is >5% faster than the pinned blocking copy; depends if only the side-stream copy
# is; wrong if neither. On CPU the flag cannot do anything, so the verdict is "depends" (on
# CUDA with pinned memory), reporting the measured CPU ratio.
RULE = ("CUDA: holds if pinned non_blocking on the same stream beats pinned blocking by >1.05x "
        "(median); depends if only the side-stream copy does; wrong if neither. CPU: depends "
        "(no pinned memory, the flag is a no-op), with the measured CPU copy ratio")
if overlap is not None:
    if overlap[0] > 1.05:
        verdict = "holds"
    elif stream_gain[0] > 1.05:
        verdict = "depends"
    else:
        verdict = "wrong"
    reason = (f"same-stream non_blocking {overlap[0]:.2f}x, side-stream non_blocking "
              f"{stream_gain[0]:.2f}x over a pinned blocking copy")
    key = {"name": "side-stream non_blocking speed-up", "value": stream_gain[0],
           "low": stream_gain[1], "high": stream_gain[2], "unit": "x"}
else:
    verdict = "depends"
    in_noise = cpu_ratio[1] <= 1.0 <= cpu_ratio[2]
    reason = (f"no CUDA: pinned memory available={pinned_ok}; CPU copy_ with non_blocking "
              f"{cpu_ratio[0]:.3f}x, per-round range [{cpu_ratio[1]:.2f} .. {cpu_ratio[2]:.2f}] "
              f"{'contains' if in_noise else 'excludes'} 1.0; the flag does nothing on CPU")
    key = {"name": "CPU copy, non_blocking speed-up", "value": cpu_ratio[0],
           "low": cpu_ratio[1], "high": cpu_ratio[2], "unit": "x"}
print(f"Verdict: {verdict}. {reason}.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": key,
    "measurements": [
        {"variant": name, "metric": "time per call", "unit": "us",
         "value": statistics.median(us), "spread": max(us) - min(us)}
        for name, us in per_call.items()
    ],
    "skipped": skipped,
}

# %%
# When not to use it
# ------------------
# Never read a tensor filled by a non-blocking device-to-host copy before a synchronisation
# (``torch.cuda.synchronize()``, an event, or an op that syncs). Pinning costs time and locks host
# RAM: pin once (``DataLoader(pin_memory=True)``), not per step; ``x.pin_memory().to(dev,
# non_blocking=True)`` on a pageable ``x`` is often slower than a plain ``x.to(dev)``.

"""
Pinned host memory for host-to-GPU copies
=========================================

The seed articles never mention pinned memory. PyTorch's data-loading documentation
("Memory Pinning") says:

    "Host to GPU copies are much faster when they originate from pinned (page-locked)
    memory."

and the CUDA notes ("Use pinned memory buffers") add that once a tensor is pinned, copies can be
asynchronous, while warning that "pinning is often an expensive operation". This tip times the
same host-to-GPU copy from ordinary (pageable) and from pinned memory at two sizes, and the cost
of pinning itself. Everything it measures needs a CUDA device; a CPU-only build shows what
pinning does there and skips the timing.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["data-loading", "cuda", "device"]
# sphinx_gallery_tips_devices = ["cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.0"
# sphinx_gallery_tips_takeaway = "Copies to the GPU from pinned memory are faster and can be asynchronous; pinning itself costs a copy, so pin once or let the DataLoader do it."
# sphinx_gallery_tips_keywords = ["pin_memory", "pinned memory", "page-locked", "non_blocking", "DataLoader", "host to device copy"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/data.html#memory-pinning", "https://docs.pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers"]

# %%
# Setup
# -----
import statistics
import warnings

import torch
import torch.utils.benchmark as benchmark

torch.manual_seed(0)
# One CPU thread: the question is not parallelism, and one thread keeps timings stable on a
# busy machine (multi-threaded small ops stall when other processes hold the cores).
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")

# %%
# What pinning does without a GPU
# -------------------------------
# Page-locked memory is allocated through the accelerator's driver, so without one there is
# nothing to pin with: depending on the version, ``pin_memory()`` raises or the DataLoader warns.
x = torch.randn(1024)
try:
    pinned = x.pin_memory()
    print("x.pin_memory() ->", "pinned" if pinned.is_pinned() else "not pinned")
except RuntimeError as err:
    print("x.pin_memory() raises:", str(err).splitlines()[0][:150])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    next(iter(torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=4, pin_memory=True)))
for w in caught:
    print("DataLoader(pin_memory=True) warns:", str(w.message).splitlines()[0][:150])
if not caught:
    print("DataLoader(pin_memory=True): no warning")


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
def copy_pageable(src):
    return src.to(device)  # synchronous: staged through a pinned bounce buffer by the driver


def copy_pinned(src_pinned):
    return src_pinned.to(device, non_blocking=True)  # DMA straight from page-locked memory


def sync():
    torch.cuda.synchronize()


def classify(r, threshold):
    """'gain' if even the lower quartile of the per-round ratios beats the threshold, 'no gain' if
    even the upper quartile misses it, 'noise' otherwise (one disturbed round cannot decide)."""
    q1, _, q3 = statistics.quantiles(r, n=4)
    return "gain" if q1 > threshold else "no gain" if q3 < threshold else "noise"



def time_interleaved(variants, label, description, rounds=5, min_run_time=0.05):
    runs = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            timer = benchmark.Timer("fn(); sync()", globals={"fn": fn, "sync": sync}, label=label,
                                    sub_label=name, description=description,
                                    num_threads=torch.get_num_threads())
            runs[name].append(timer.blocked_autorange(min_run_time=min_run_time))
    return runs


# %%
# Check and measurement (CUDA only)
# ---------------------------------
# Speed-up = pageable copy time / pinned copy time, one ratio per round. The pinning step is
# timed separately: pinning a batch yourself before every copy costs an extra host copy.
RULE = ("holds if copies from pinned memory are >1.10x faster than from pageable memory at every "
        "size (lower quartile of the per-round speed-up above 1.10); wrong if at no size (upper "
        "quartile below 1.10); depends otherwise, inside the noise, or with no CUDA device")
measurements, skipped, ratios = [], [], {}
if torch.cuda.is_available():
    all_m = []
    for mib in (1, 64):
        src = torch.randn(mib * 2**18)  # mib MiB of float32
        src_pinned = src.pin_memory()
        torch.testing.assert_close(copy_pinned(src_pinned).cpu(), src, rtol=0, atol=0)
        runs = time_interleaved({"pageable .to(cuda)": lambda: copy_pageable(src),
                                 "pinned .to(cuda, non_blocking)": lambda: copy_pinned(src_pinned),
                                 "pin_memory() itself": lambda: src.pin_memory()},
                                label="host to device copy", description=f"{mib} MiB")
        for ms in runs.values():
            all_m += ms
        page, pin = runs["pageable .to(cuda)"], runs["pinned .to(cuda, non_blocking)"]
        ratios[mib] = [a.median / b.median for a, b in zip(page, pin)]
        for name, ms in runs.items():
            us = [m.median * 1e6 for m in ms]
            measurements.append({"variant": f"{name}, {mib} MiB", "metric": "time", "unit": "us",
                                 "value": statistics.median(us), "spread": max(us) - min(us)})
    benchmark.Compare(all_m).print()
    for mib, r in ratios.items():
        print(f"speed-up of pinned over pageable, {mib} MiB: {statistics.median(r):.2f}x "
              f"[{min(r):.2f} .. {max(r):.2f}]")
    med = {mib: statistics.median(r) for mib, r in ratios.items()}
    cls = {mib: classify(r, 1.10) for mib, r in ratios.items()}
    if all(c == "gain" for c in cls.values()):
        verdict = "holds"
    elif all(c == "no gain" for c in cls.values()):
        verdict = "wrong"
    else:
        verdict = "depends"
    print(f"Verdict: {verdict}. Pinned copies: "
          + ", ".join(f"{m} MiB {v:.2f}x ({cls[m]})" for m, v in med.items()) + " faster.")
else:
    verdict = "depends"
    skipped.append("host-to-device copy timing: needs CUDA (no CUDA device in this build)")
    print("Skipped: host-to-device copy timing needs CUDA (no CUDA device in this build)")
    print("Verdict: depends. Pinned memory only matters for copies to a GPU; none here to measure.")
print(f"Rule: {RULE}")

big = ratios.get(64)
RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": None if big is None else {"name": "pinned speed-up, 64 MiB", "value": statistics.median(big),
                                     "low": min(big), "high": max(big), "unit": "x"},
    "measurements": measurements,
    "skipped": skipped,
}

# %%
# When not to use it
# ------------------
# Pinned memory cannot be swapped out: pinning gigabytes starves the rest of the system. Do not
# call ``.pin_memory()`` on every batch in the training loop (that is an extra copy); let the
# ``DataLoader`` pin in its background thread (``pin_memory=True``), or pin a reusable buffer once.
# ``non_blocking=True`` from pageable memory gives no overlap.

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
# The helpers every tip on this site shares (one module, written out in each download). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, anti-pattern time / recommended time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import calibrate, compare_times, decide, plot_ratios, report


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
# The claim is about the copy itself, so each size must make the copy, not the host's call
# around it, take the time: a copy of a few KiB lasts a few microseconds, less than the host
# needs to issue it and wait for it. So the sizes come from this GPU's own rates, measured at
# the start (``calibrate``): copies that take 4, 16, 64 and 256 times the host's time to launch
# one kernel at the calibrated pinned copy rate. The timer synchronises before and after each
# block of calls, so a copy is timed until it has landed on the GPU. Speed-up = pageable copy
# time / pinned copy time, one ratio per round; the same for pinning every batch.
pinned_gain, pin_each_time = [], []
if device.type == "cuda":
    calib = calibrate(device)
    for launches in [4, 16, 64, 256]:
        elements = round(launches * calib["launch_s"] * calib["copy_h2d_pinned"] / 4)
        src = torch.ones(max(2**10, elements))  # float32, every page touched
        src_pinned = src.pin_memory()
        mib = src.numel() * 4 / 2**20
        work = {"bytes": src.numel() * 4, "limit": "copy_h2d_pinned"}
        pinned_gain.append(compare_times(
            f"pinned vs pageable copy, {mib:.3g} MiB",
            {"pageable": lambda: copy_pageable(src),
             "pinned": lambda: copy_pinned(src_pinned)},
            threshold=1.5, device=device, x=mib, budget_s=2.0, work=work))
        pin_each_time.append(compare_times(
            f"pin every batch vs pageable copy, {mib:.3g} MiB",
            {"pageable": lambda: copy_pageable(src),
             "pin, then copy": lambda: pin_then_copy(src)},
            threshold=1.5, device=device, x=mib, budget_s=2.0, work=work))
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
# the claim is about copies from memory that is already pinned. It is a claim about the copy
# on the GPU's link: a size at which the GPU idled half the time or more (the host's call
# set the pace) is shown, labelled, and decides nothing (``about="device"``).
RULE = ("holds if copies from pinned memory are >1.5x faster than from pageable "
        "memory at every size (interval above 1.5); depends if at some sizes only; "
        "wrong if at none. Only sizes that kept the GPU busy at least half the time "
        "decide")
verdicts = {}
if device.type == "cuda":
    decision = decide(device, [
        ("holds", {"pinned copy": "all above"}),
        ("depends", {"pinned copy": "any above"}),
        ("wrong", {}),
    ], groups={"pinned copy": pinned_gain, "pin every batch": pin_each_time},
        key=pinned_gain[2], about="device")
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

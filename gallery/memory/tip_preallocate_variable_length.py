"""
Variable sequence lengths: preallocate with one maximum-length batch
====================================================================

PyTorch's *Performance Tuning Guide* ("Preallocate memory in case of variable input length",
claim S5-6) warns about batches whose sequence length changes:

    "If a batch with a short sequence length is followed by an another batch with longer
    sequence length, then PyTorch is forced to release intermediate buffers from previous
    iteration and to re-allocate new buffers. This process is time consuming and causes
    fragmentation in the caching allocator which may result in out-of-memory errors."

Its fix: before training, run a forward and a backward pass on a batch of the maximum length
(no optimizer step), zero the gradients, then train as usual: the caching allocator then holds
blocks of the largest sizes, which later, shorter batches reuse. This tip trains a small
token-wise MLP on batches whose length grows from step to step, the case the guide describes,
with and without that preallocation. It measures the memory the allocator reserves, how many
segments it asks the driver for, the time, and what happens under a memory cap just above what
the preallocated run needs. The claim is about the CUDA caching allocator: a machine without
CUDA measures nothing here.
"""
# sphinx_gallery_tips_claims = ["S5-6"]
# sphinx_gallery_tips_tags = ["allocator", "cuda", "training"]
# sphinx_gallery_tips_devices = ["cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "2.5"
# sphinx_gallery_tips_takeaway = "With growing sequence lengths, one max-length forward and backward first lets the caching allocator reuse its blocks: see the reserved memory and segments."
# sphinx_gallery_tips_keywords = ["variable sequence length", "preallocate", "caching allocator", "fragmentation", "memory_reserved", "max_memory_reserved", "memory_stats", "CUDA out of memory", "NLP", "speech recognition"]
# sphinx_gallery_tips_errors = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.16 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.63 GiB is free. Including non-PyTorch memory, this process has 77.42 GiB memory in use. Of the allocated memory 68.16 GiB is allocated by PyTorch, and 3.49 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/docs/stable/notes/cuda.html#memory-management", "https://docs.pytorch.org/docs/stable/generated/torch.cuda.memory_stats.html"]
# sphinx_gallery_tips_related = ["tip_expandable_segments", "tip_empty_cache_every_step"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). Memory is
# measured, not computed: the CUDA caching allocator's own counters. Each comparison pairs the
# anti-pattern with the recommended pattern, one pair per round, as a ratio; speed comparisons
# time both in alternating rounds with ``torch.utils.benchmark``. The interval is a ~95%
# confidence interval for the median (with 5 rounds or fewer, their whole range). A verdict is
# the first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import (compare_times, compare_values, decide, plot_ratios,
                            plot_series, report)


# %%
# Setup
# -----
# Two blocks ``Linear(d, 2d)``, GELU, ``Linear(2d, d)`` applied to every token of
# a ``[batch, length, d]`` input, trained with SGD. The width and the maximum length grow with
# the GPU's streaming multiprocessors (d = 1,024 and up to 4,224 tokens on a 132-SM H100: a
# step at full length keeps hundreds of MiB of activations for its backward pass).
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
on_cuda = device.type == "cuda"
print(f"device: {device}, torch {torch.__version__}")
skipped = []
batch = 4
if on_cuda:
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    d = max(64, 8 * sms // 64 * 64)
    max_len = 32 * sms
    print(f"batch {batch}, d {d}, lengths up to {max_len} ({sms} SMs)")
else:
    skipped.append("all measurements: the CUDA caching allocator needs a CUDA device")
    print("Skipped:", skipped[-1])


def make_model(d):
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.GELU(),
                                  torch.nn.Linear(2 * d, d)) for _ in range(2)]
    return torch.nn.Sequential(*blocks).to(device)


def train_step(model, optimizer, x):
    optimizer.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()


def lengths_growing(steps):
    """``steps`` lengths growing evenly to the maximum: each longer than the last."""
    return [max(1, max_len * (i + 1) // steps) for i in range(steps)]


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# Both train on the same batches (the seed is set first). The recommended loop starts with the
# guide's preallocation: forward and backward at the maximum length, no optimizer step, then
# the gradients are zeroed (here: dropped, as ``zero_grad`` does by default since PyTorch 2.0).
def train(model, optimizer, lengths):  # anti-pattern: each length meets a cold cache
    torch.manual_seed(1)
    for length in lengths:
        train_step(model, optimizer, torch.randn(batch, length, d, device=device))


def preallocate(model, max_len):
    x = torch.randn(batch, max_len, d, device=device)  # [batch, length, d]
    model(x).square().mean().backward()  # forward and backward, no optimizer step
    model.zero_grad(set_to_none=True)


def train_preallocated(model, optimizer, lengths):  # recommended
    preallocate(model, max(lengths))
    train(model, optimizer, lengths)


# %%
# Check: the same training
# ------------------------
# Preallocation must not change what is learned: two identical models, the same batches, the
# same weights at the end.
if on_cuda:
    models = [make_model(d) for _ in range(2)]
    for model, fn in zip(models, (train, train_preallocated)):
        fn(model, torch.optim.SGD(model.parameters(), lr=1e-3), lengths_growing(4))
    for p, q in zip(*(m.parameters() for m in models)):
        torch.testing.assert_close(p, q)
    print("the same weights after training with and without preallocation")
    del models

# %%
# Measurement
# -----------
# Each run starts from an empty cache (``empty_cache()``), as training does, and trains on
# ``steps`` batches of growing length. It records the peak of reserved memory
# (``max_memory_reserved()``), the peak of tensor memory (``max_memory_allocated()``) and the
# segments the allocator asked the driver for (``memory_stats()["segment.all.allocated"]``).
# Time: one run with / without preallocation, the preallocation's own step included. It
# belongs there: both costs are paid once, from a cold cache. The anti-pattern pays for
# a new block each time a batch is longer than any before (here at every step); the fix
# pays one step at the maximum length up front, and the guide's claim is that this
# trade saves time. Leaving the preallocation out would time the fix without its cost.
STEPS = [2, 4, 8, 16]
runs, reserved_gain, segment_gain, time_gain = {}, [], [], []


def fresh_run(fn, model, optimizer, lengths):
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    segments = torch.cuda.memory_stats()["segment.all.allocated"]
    fn(model, optimizer, lengths)
    torch.cuda.synchronize()
    return {"reserved": torch.cuda.max_memory_reserved() / 2**20,
            "allocated": torch.cuda.max_memory_allocated() / 2**20,
            "segments": torch.cuda.memory_stats()["segment.all.allocated"] - segments}


if on_cuda:
    model = make_model(d)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for steps in STEPS:
        lengths = lengths_growing(steps)
        for name, fn in (("growing lengths", train),
                         ("preallocated", train_preallocated)):
            runs.setdefault(name, []).append(fresh_run(fn, model, optimizer, lengths))
        without, with_ = runs["growing lengths"][-1], runs["preallocated"][-1]
        reserved_gain.append(compare_values(
            f"reserved without / with preallocation, {steps} lengths",
            {"growing lengths": [without["reserved"]],
             "preallocated": [with_["reserved"]]},
            threshold=1.1, device=device, metric="memory", unit="MiB", x=steps))
        segment_gain.append(compare_values(
            f"segments allocated without / with preallocation, {steps} lengths",
            {"growing lengths": [without["segments"]],
             "preallocated": [max(1, with_["segments"])]},
            threshold=1.1, device=device, metric="count", unit="segments", x=steps))
        time_gain.append(compare_times(
            f"run time without / with preallocation, {steps} lengths",
            {"growing lengths": lambda: fresh_run(train, model, optimizer, lengths),
             "preallocated": lambda: fresh_run(train_preallocated, model, optimizer,
                                               lengths)},
            threshold=1.05, device=device, x=steps, budget_s=1.0))
    print(f"{'lengths':>7} {'reserved MiB':>21} {'tensor peak MiB':>21} "
          f"{'segments':>13}")
    print(f"{'':>7} {'without':>10} {'with':>10} {'without':>10} {'with':>10} "
          f"{'without':>6} {'with':>6}")
    for i, steps in enumerate(STEPS):
        a, b = runs["growing lengths"][i], runs["preallocated"][i]
        print(f"{steps:>7} {a['reserved']:>10.0f} {b['reserved']:>10.0f} "
              f"{a['allocated']:>10.0f} {b['allocated']:>10.0f} "
              f"{a['segments']:>6} {b['segments']:>6}")

# %%
# Under a memory cap
# ------------------
# The guide's warning is about running out of memory. Both loops run again, with 16 lengths,
# under ``set_per_process_memory_fraction`` set to 1.2 times the reserved peak of the
# preallocated run: what each does when the allocator cannot simply ask for more.
# ``memory_stats()["num_alloc_retries"]`` counts the times the allocator had to free its cache
# and retry.
facts = {}


def capped_outcome(fn, lengths):
    retries = torch.cuda.memory_stats()["num_alloc_retries"]
    try:
        fresh_run(fn, model, optimizer, lengths)
    except torch.OutOfMemoryError:
        ended = "out of memory"
    else:
        flushed = torch.cuda.memory_stats()["num_alloc_retries"] - retries
        ended = f"completed, {flushed} cache flush(es)"
    model.zero_grad(set_to_none=True)
    torch.cuda.empty_cache()
    return ended


if on_cuda:
    total = torch.cuda.get_device_properties(device).total_memory
    cap = 1.2 * runs["preallocated"][-1]["reserved"] * 2**20
    index = torch.cuda.current_device()
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), index)
    for name, fn in (("growing lengths", train), ("preallocated", train_preallocated)):
        facts[f"under the cap, {name}"] = capped_outcome(fn, lengths_growing(STEPS[-1]))
    torch.cuda.set_per_process_memory_fraction(1.0, index)
    for name, value in facts.items():
        print(f"{name}: {value}")

# %%
# Memory reserved, by the number of lengths
# -----------------------------------------
# The reserved peak with and without preallocation, beside the peak of tensor memory (what the
# longest step needs either way). Then the time of a run without / with preallocation: above
# 1.0, preallocating is faster.
if on_cuda:
    fig = plot_series(
        {f"{what}, {name}": (STEPS, [r[key] for r in runs[name]])
         for what, key in (("reserved", "reserved"), ("tensor peak", "allocated"))
         for name in ("growing lengths", "preallocated")},
        xlabel="batches of growing length in the run (log scale)",
        ylabel="peak memory (MiB)", device=device, logx=True,
        title=f"Token-wise MLP, d {d}, batch {batch}, lengths up to {max_len}")
    fig = plot_ratios({"preallocated": time_gain},
                      xlabel="batches of growing length in the run (log scale)",
                      ylabel="time without / time with preallocation",
                      title="Training run from an empty cache")

# %%
# Verdict
# -------
# Decided on CUDA only. The fragmentation half holds if, without preallocation, the allocator
# reserves more than 10% more memory (interval above 1.1) whenever there are 4 lengths or more;
# the time half if a run without preallocation is more than 5% slower at some number of
# lengths. Both: holds; one of them: depends; neither: wrong. The capped runs are reported
# beside it.
RULE = ("CUDA only: holds if without preallocation the peak reserved memory is >10% "
        "higher (interval above 1.1) at 4, 8 and 16 growing lengths and the run is >5% "
        "slower (interval above 1.05) at some number of lengths; depends if only one "
        "of the two; wrong if neither")
verdicts = {}
if on_cuda:
    decision = decide(device, [
        ("holds", {"more reserved": "all above", "slower": "any above"}),
        ("depends", {"more reserved": "all above"}),
        ("depends", {"slower": "any above"}),
        ("wrong", {}),
    ], groups={"more reserved": reserved_gain[1:], "slower": time_gain,
               "more segments": segment_gain},
        facts=facts, key=reserved_gain[-1], about="host")
    report(decision, RULE)
    verdicts[device.type] = decision
else:
    print("Verdict on CUDA: not measured (no CUDA device in this build); none on CPU")
RESULT = {"rule": RULE, "verdicts": verdicts, "measurements": [], "skipped": skipped}

# %%
# When not to use it
# ------------------
# Preallocation costs one step at the maximum length, and it only helps if that maximum is
# known: a cap on the sequence length, or the longest sample of the dataset. When batches are
# bucketed by length or padded to a few fixed lengths, the allocator meets few sizes anyway
# (batches sorted by increasing length are the growing case measured here). The allocator
# can also be set to adapt: ``expandable_segments:True`` (see its tip) lets one segment grow
# instead of leaving blocks of the old sizes behind.
# Preallocating does not lower the peak of tensor memory: if the longest batch does not fit,
# shorten it or see activation checkpointing.

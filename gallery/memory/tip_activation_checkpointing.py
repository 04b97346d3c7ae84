"""
Activation checkpointing: memory saved versus time spent recomputing
====================================================================

The seed articles never mention activation checkpointing. PyTorch's *Performance Tuning Guide*
recommends it ("Checkpoint intermediate buffers"):

    "Buffer checkpointing is a technique to mitigate the memory capacity burden of
    model training. Instead of storing inputs of all layers to compute upstream
    gradients in backward propagation, it stores the inputs of a few layers and
    the others are recomputed during backward pass."

    "The best is not to store large layer outputs that have small re-computation cost.
    The example target layers are activation functions (e.g. ``ReLU``, ``Sigmoid``, ``Tanh``)"

and the ``torch.utils.checkpoint.checkpoint`` docstring adds: "It is recommended that you use
``use_reentrant=False``." This tip measures the memory held from the end of forward until
backward, with and without checkpointing, for 2 to 16 blocks; on CUDA also the peak of forward
plus backward, which includes the recompute; and it times the recompute.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["training", "autograd"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "2.1"
# sphinx_gallery_tips_statement = "Checkpointing intermediate buffers (torch.utils.checkpoint, use_reentrant=False) cuts the memory kept for backward."
# sphinx_gallery_tips_takeaway = "checkpoint(use_reentrant=False) keeps only block inputs for backward: a multiple less memory at every depth, for one extra forward."
# sphinx_gallery_tips_keywords = ["torch.utils.checkpoint", "checkpoint", "use_reentrant", "activation checkpointing", "saved_tensors_hooks", "recompute"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/docs/stable/checkpoint.html"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). Memory is
# measured, not computed: exact byte counts of live tensors on the CPU, the CUDA caching
# allocator's own counters on a GPU. Each comparison pairs the anti-pattern with the
# recommended pattern, one pair per round (here: per step count or size), as a difference or a
# ratio; the interval is a ~95% confidence interval for its median (with 5 rounds or fewer,
# their whole range). A verdict is the first case of the rule whose conditions the
# measurements meet.
from tipsite.tipkit import (calibrate, compare_times, compare_values, decide,
                            plot_series, report)


# %%
# Setup
# -----
# Blocks of a small matmul followed by cheap activations: exactly the guide's target, large
# outputs with a small recompute cost; wider on a GPU, with a batch sized to it (below).
import math

import torch
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
# One CPU thread: the question is not parallelism, and one thread keeps timings
# stable on a busy machine (small multi-threaded ops stall when others hold the cores).
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

# On a GPU the time figure must time the GPU's work, not the host's launches: the batch
# is the power of two that makes a forward and backward at depth 4 take about 20 times
# the host's time to launch its ~48 kernels, at this GPU's own matmul and copy rates,
# measured at the start (``calibrate``). A block's forward and backward pass over its
# activations about 12 times (4 bytes each) and run its matmul 3 times.
BATCH, WIDTH = {"cpu": (1024, 128), "cuda": (1024, 256)}[device.type]
if device.type == "cuda":
    calib = calibrate(device)
    row_s = 4 * (12 * 4 * WIDTH / calib["copy_device"]
                 + 3 * 2 * WIDTH**2 / calib["matmul_float32"])  # depth 4, one row
    BATCH = 2 ** max(10, min(17, int(math.log2(20 * 48 * calib["launch_s"] / row_s))))
    print(f"batch {BATCH}, width {WIDTH}")
DEPTHS = [2, 4, 8, 16]
weights = [(torch.randn(WIDTH, WIDTH, device=device) / WIDTH**0.5).requires_grad_()
           for _ in range(max(DEPTHS))]
x = torch.randn(BATCH, WIDTH, device=device, requires_grad=True)  # [batch, width]


def block(h, w):
    h = h @ w
    return torch.tanh(torch.nn.functional.gelu(h)).sigmoid()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
def forward_plain(depth):
    h = x
    for w in weights[:depth]:
        h = block(h, w)
    return h.sum()


def forward_checkpointed(depth):
    h = x
    for w in weights[:depth]:
        h = checkpoint(block, h, w, use_reentrant=False)
    return h.sum()


# %%
# Check: identical gradients
# --------------------------
# Recomputing the same deterministic ops gives the same values, so the gradients match exactly.
def grads(fwd, depth):
    return torch.autograd.grad(fwd(depth), [x, *weights[:depth]])


for a, b in zip(grads(forward_plain, 4), grads(forward_checkpointed, 4)):
    torch.testing.assert_close(a, b, rtol=0, atol=0)
print("gradients identical with and without checkpointing")

# %%
# Memory held for backward, by depth
# ----------------------------------
# From the end of forward until backward. On the CPU: ``saved_tensors_hooks`` sees every
# tensor autograd saves, and each storage counts once (the input ``x`` and the weights live
# anyway and are left out). On CUDA: ``memory_allocated`` after forward, with the loss
# alive, minus before it; and the peak of forward plus backward (``max_memory_allocated``
# after ``reset_peak_memory_stats``), where the checkpointed version also holds one block's
# recomputed activations.
def held_for_backward(fwd, depth):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        loss = fwd(depth)
        torch.cuda.synchronize(device)
        return torch.cuda.memory_allocated(device) - before
    live = {t.untyped_storage().data_ptr() for t in [x, *weights]}
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in live:
            storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fwd(depth)
    del loss
    return sum(storages.values())


def peak_of_step(fwd, depth):
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    grads(fwd, depth)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


VARIANTS = {"plain": forward_plain, "checkpointed": forward_checkpointed}
held = {name: [held_for_backward(fwd, d) / 2**20 for d in DEPTHS]
        for name, fwd in VARIANTS.items()}
peak = {}
if torch.cuda.is_available():
    peak = {name: [peak_of_step(fwd, d) / 2**20 for d in DEPTHS]
            for name, fwd in VARIANTS.items()}
print("MiB, plain and checkpointed: held for backward"
      + ("; peak of forward + backward" if peak else ""))
for i, depth in enumerate(DEPTHS):
    line = f"depth {depth:2d}: {held['plain'][i]:7.2f}, {held['checkpointed'][i]:7.2f}"
    if peak:
        line += f"; {peak['plain'][i]:7.2f}, {peak['checkpointed'][i]:7.2f}"
    print(line)


def reduction(name, values, depth_index):
    return compare_values(f"{name}, depth {DEPTHS[depth_index]}",
                          {"plain": [values["plain"][depth_index]],
                           "checkpointed": [values["checkpointed"][depth_index]]},
                          threshold=1.5, device=device, metric=name, unit="MiB",
                          x=DEPTHS[depth_index])


saving = [reduction("memory held for backward", held, i) for i in range(len(DEPTHS))]
peak_saving = ([reduction("peak of forward + backward", peak, i)
                for i in range(len(DEPTHS))] if peak else [])

# %%
# Time: the recompute cost
# ------------------------
# One timed statement is forward plus backward at depth 4, the variants in alternating
# rounds; the ratio is checkpointed time / plain time, the price of the saving.
cost = compare_times("time, checkpointed / plain (depth 4)",
                     {"checkpointed": lambda: grads(forward_checkpointed, 4),
                      "plain": lambda: grads(forward_plain, 4)},
                     threshold=1.0, device=device, x=4, budget_s=1.5)

# %%
# Memory against depth
# --------------------
series = {f"{name}: held for backward": (DEPTHS, values)
          for name, values in held.items()}
series |= {f"{name}: peak of forward + backward": (DEPTHS, values)
           for name, values in peak.items()}
fig = plot_series(series, xlabel="blocks (depth)", ylabel="memory (MiB)",
                  title=f"Activation checkpointing, batch {BATCH}, width {WIDTH}",
                  device=device)

# %%
# Verdict
# -------
# The advice is about memory: it holds if the memory held for backward shrinks by more than
# 1.5x at every depth (exact counts; one round each). The time cost and, on CUDA, the peak
# are shown beside it and decide nothing; the recompute is GPU work, so on CUDA the time is
# labelled host-bound if the GPU idled half of it or more (``about="device"``).
RULE = ("holds if checkpointing reduces the memory held for backward by more than "
        "1.5x at every depth; wrong if at none; depends otherwise")
groups = {"memory held for backward": saving, "time cost": [cost]}
if peak_saving:
    groups["peak of forward + backward"] = peak_saving
decision = decide(device, [("holds", {"memory held for backward": "all above"}),
                           ("wrong", {"memory held for backward": "none above"}),
                           ("depends", {})],
                  groups=groups, key=saving[-1], about="device")
report(decision, RULE)
skipped = [] if peak else ["peak of forward + backward (max_memory_allocated): "
                           "needs CUDA (no CUDA device in this build)"]
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": skipped}

# %%
# When not to use it
# ------------------
# Checkpointing a matmul- or conv-heavy block saves little (their inputs must be kept anyway)
# and repeats the expensive part. Random ops inside a checkpointed block (dropout) are replayed
# with the saved RNG state, which costs a little more. During backward the checkpointed
# version holds one block's recomputed activations on top of what it saved, so the peak falls
# by less than the memory held between forward and backward. When memory is not the limit,
# it only makes training slower.

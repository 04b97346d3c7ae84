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
``use_reentrant=False``." This tip counts, byte for byte, what autograd keeps alive between
forward and backward with and without checkpointing, and times the recompute it costs.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["training", "autograd"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "2.1"
# sphinx_gallery_tips_takeaway = "checkpoint(use_reentrant=False) keeps only block inputs for backward: a multiple less memory for one extra forward of compute."
# sphinx_gallery_tips_keywords = ["torch.utils.checkpoint", "checkpoint", "use_reentrant", "activation checkpointing", "saved_tensors_hooks", "recompute"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/docs/stable/checkpoint.html"]

# %%
# Setup
# -----
# Four blocks of a small matmul followed by cheap activations: exactly the guide's target, large
# outputs with a small recompute cost.
import statistics

import torch
import torch.utils.benchmark as benchmark
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
# One CPU thread: the question is not parallelism, and one thread keeps timings stable on a
# busy machine (multi-threaded small ops stall when other processes hold the cores).
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")

batch, width, depth = 2048, 128, 4
weights = [(torch.randn(width, width, device=device) / width**0.5).requires_grad_()
           for _ in range(depth)]
x = torch.randn(batch, width, device=device, requires_grad=True)  # [batch, width], 1 MiB


def block(h, w):
    h = h @ w
    return torch.tanh(torch.nn.functional.gelu(h)).sigmoid()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
def forward_plain():
    h = x
    for w in weights:
        h = block(h, w)
    return h.sum()


def forward_checkpointed():
    h = x
    for w in weights:
        h = checkpoint(block, h, w, use_reentrant=False)
    return h.sum()


# %%
# Check: identical gradients
# --------------------------
# Recomputing the same deterministic ops gives the same values, so the gradients match exactly.
def grads(fwd):
    return torch.autograd.grad(fwd(), [x, *weights])


for a, b in zip(grads(forward_plain), grads(forward_checkpointed)):
    torch.testing.assert_close(a, b, rtol=0, atol=0)
print("gradients identical with and without checkpointing")

# %%
# Memory kept for backward, counted exactly
# -----------------------------------------
# ``saved_tensors_hooks`` sees every tensor autograd saves for backward. Counting each storage
# once gives the bytes that stay alive from the end of forward until backward. (During backward
# the checkpointed version briefly holds one block's recomputed activations on top of this.)


def saved_bytes(fwd):
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        storages[(s.device, s.data_ptr())] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fwd()
    return sum(storages.values()), len(storages)


plain_bytes, plain_n = saved_bytes(forward_plain)
ckpt_bytes, ckpt_n = saved_bytes(forward_checkpointed)
mem_ratio = plain_bytes / ckpt_bytes
print(f"saved for backward, plain:        {plain_bytes / 2**20:6.2f} MiB in {plain_n} storages")
print(f"saved for backward, checkpointed: {ckpt_bytes / 2**20:6.2f} MiB in {ckpt_n} storages")
print(f"memory kept for backward: {mem_ratio:.2f}x less with checkpointing")

# %%
# Time: the recompute cost
# ------------------------
# One timed statement = forward + backward. Variants alternate round by round; cost =
# checkpointed time / plain time.


def time_interleaved(variants, label, rounds=5, min_run_time=0.05):
    runs = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            timer = benchmark.Timer("fn()", globals={"fn": fn}, label=label, sub_label=name,
                                    description=f"{batch}x{width}, {depth} blocks",
                                    num_threads=torch.get_num_threads())
            runs[name].append(timer.blocked_autorange(min_run_time=min_run_time))
    return runs


runs = time_interleaved({"plain": lambda: grads(forward_plain),
                         "checkpointed": lambda: grads(forward_checkpointed)},
                        label="forward + backward")
benchmark.Compare(runs["plain"] + runs["checkpointed"]).print()
cost = [c.median / p.median for p, c in zip(runs["plain"], runs["checkpointed"])]
print(f"time cost of checkpointing: {statistics.median(cost):.2f}x  [{min(cost):.2f} .. {max(cost):.2f}]")

# %%
# Verdict
# -------
# The advice is about memory; it holds if the bytes kept for backward shrink by more than 1.5x
# (an exact count, no noise). The time cost is the price, reported beside it: in FLOPs one extra
# forward (about 1.3x, as backward costs about two forwards), plus checkpoint's per-call
# bookkeeping, which weighs more when the blocks are this small.
RULE = ("holds if checkpointing reduces the bytes saved for backward by more than 1.5x (exact "
        "count); wrong if it reduces them by less than 1.1x; depends otherwise")
verdict = "holds" if mem_ratio > 1.5 else "wrong" if mem_ratio < 1.1 else "depends"
print(f"Verdict: {verdict}. {mem_ratio:.2f}x less memory kept for backward, "
      f"for {statistics.median(cost):.2f}x the forward+backward time.")
print(f"Rule: {RULE}")

times = {name: [m.median * 1e3 for m in ms] for name, ms in runs.items()}
RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": "memory kept for backward, plain / checkpointed", "value": mem_ratio, "unit": "x"},
    "measurements": [
        {"variant": "plain", "metric": "saved for backward", "unit": "MiB", "value": plain_bytes / 2**20},
        {"variant": "checkpointed", "metric": "saved for backward", "unit": "MiB", "value": ckpt_bytes / 2**20},
    ] + [
        {"variant": name, "metric": "forward + backward", "unit": "ms",
         "value": statistics.median(v), "spread": max(v) - min(v)}
        for name, v in times.items()
    ],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# Checkpointing a matmul- or conv-heavy block saves little (their inputs must be kept anyway)
# and repeats the expensive part. Random ops inside a checkpointed block (dropout) are replayed
# with the saved RNG state, which costs a little more. When memory is not the limit, it only
# makes training slower.

"""
``F.scaled_dot_product_attention`` against hand-written attention
=================================================================

``torch.nn.functional.scaled_dot_product_attention`` (SDPA) computes
``softmax(q @ k.T / sqrt(d)) @ v``, which its documentation spells out as an "Efficient
implementation equivalent to the following", the same three lines most people write by
hand. Which implementation runs is in a note on that page (claim S6-10):

    "The function may call optimized kernels for improved performance when using the CUDA
    backend. For all other backends, the PyTorch implementation will be used."

The optimized kernels (FlashAttention-2, memory-efficient attention, cuDNN) never build the
sequence x sequence matrix of attention weights that the hand-written version materialises:
they work through it block by block. So they should pay in time and, above all, in memory
as the sequence grows. This tip times a training step (forward and backward) of both
versions across sequence lengths, measures the step's peak memory, and records which
kernel SDPA ran, on the CPU too, where the note says only the plain implementation runs.
"""
# sphinx_gallery_tips_claims = ["S6-10"]
# sphinx_gallery_tips_tags = ["attention", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "SDPA matches hand-written attention; recent releases run a fused kernel on the CPU too (despite its docs): less memory as sequences grow."
# sphinx_gallery_tips_keywords = ["scaled_dot_product_attention", "SDPA", "flash attention", "manual attention", "naive attention", "softmax", "sequence length", "memory-efficient attention", "transformer", "out of memory"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html", "https://docs.pytorch.org/docs/stable/generated/torch.nn.attention.sdpa_kernel.html"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, anti-pattern time / recommended time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import compare_times, decide, plot_ratios, plot_series, report


# %%
# Setup
# -----
# float32 on the CPU; bfloat16 on CUDA, the type fused attention kernels are written for.
# Head size 64. On a GPU the batch grows with its number of streaming multiprocessors (SMs),
# two (batch, head) pairs per SM (264 on an H100 with 132 SMs), so that every SM has work.
import math

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if device.type == "cuda":
    dtype, heads = torch.bfloat16, 2
    batch = torch.cuda.get_device_properties(device).multi_processor_count
    lengths = [256, 512, 1024, 2048]
else:
    dtype, heads, batch = torch.float32, 2, 1
    lengths = [128, 256, 512, 1024]
head_dim = 64
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")
print(f"batch {batch} x {heads} heads, head size {head_dim}, {dtype}")


def qkv(length):
    """Query, key and value, [batch, heads, length, head_dim] each, requiring grad."""
    shape = (batch, heads, length, head_dim)
    return [torch.randn(shape, device=device, dtype=dtype).requires_grad_()
            for _ in range(3)]


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
def attention_by_hand(q, k, v):
    weights = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # [B, H, L, L]
    return torch.softmax(weights, dim=-1) @ v


def attention_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def train_step(attend, q, k, v, grad_out):
    """Forward and backward through attention; the gradients of q, k and v."""
    return torch.autograd.grad(attend(q, k, v), (q, k, v), grad_out)


# %%
# Check: same outputs, same gradients
# -----------------------------------
# The fused kernels add up in a different order (and in float32 inside, for bfloat16
# inputs), so the comparison allows that type's rounding.
q, k, v = qkv(lengths[0])
grad_out = torch.randn_like(q)
tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else \
      {"rtol": 2e-2, "atol": 2e-2}
torch.testing.assert_close(attention_sdpa(q, k, v), attention_by_hand(q, k, v), **tol)
for a, b in zip(train_step(attention_sdpa, q, k, v, grad_out),
                train_step(attention_by_hand, q, k, v, grad_out)):
    torch.testing.assert_close(a, b, **tol)
print("SDPA matches the hand-written attention: outputs and the gradients of q, k, v")

# %%
# Which kernel does SDPA run here? The profiler lists the operators a call dispatched to.
with profile(activities=[ProfilerActivity.CPU]) as prof:
    train_step(attention_sdpa, q, k, v, grad_out)
kernels = sorted({e.name for e in prof.events()
                  if "scaled_dot_product" in e.name and "backward" not in e.name})
fused = any(word in name for name in kernels
            for word in ("flash", "efficient", "cudnn"))
print("SDPA dispatched to:", ", ".join(kernels))
print("a fused kernel ran:", fused)

# %%
# Measurement: time
# -----------------
# One timed call = one training step of attention alone (forward, then the gradients of q,
# k and v). Speed-up = hand-written time / SDPA time.
speedups = []
for length in lengths:
    q, k, v = qkv(length)
    grad_out = torch.randn_like(q)
    speedups.append(compare_times(
        f"SDPA speed-up, sequence {length}",
        {"hand-written": lambda: train_step(attention_by_hand, q, k, v, grad_out),
         "SDPA": lambda: train_step(attention_sdpa, q, k, v, grad_out)},
        threshold=1.1, device=device, x=length, budget_s=1.0))


# %%
# Measurement: peak memory
# ------------------------
# The memory a training step needs above what it starts with (q, k, v and the output
# gradient already exist). On CUDA: the allocator's own peak counter. On the CPU:
# ``torch.profiler`` with ``profile_memory=True``, the peak of the running total of the
# memory each operator kept when it returned and each tensor freed (scratch space an
# operator frees before returning, such as a fused kernel's blocks, is not in it).
def step_peak(attend, q, k, v, grad_out):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        train_step(attend, q, k, v, grad_out)
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        train_step(attend, q, k, v, grad_out)
    running = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        running += event.self_cpu_memory_usage
        peak = max(peak, running)
    return peak


peaks = {"hand-written": [], "SDPA": []}
for length in lengths:
    q, k, v = qkv(length)
    grad_out = torch.randn_like(q)
    for name, attend in (("hand-written", attention_by_hand), ("SDPA", attention_sdpa)):
        peaks[name].append(step_peak(attend, q, k, v, grad_out))
measurements = []
for i, length in enumerate(lengths):
    hand, sdpa = peaks["hand-written"][i], peaks["SDPA"][i]
    print(f"sequence {length:>5}: peak above start {hand / 2**20:9.2f} MiB by hand, "
          f"{sdpa / 2**20:8.2f} MiB with SDPA")
    for name in peaks:
        measurements.append({"variant": name, "value": peaks[name][i], "unit": "B",
                             "metric": f"peak memory, sequence {length}",
                             "device": device.type})
leaner = all(s < h for s, h in zip(peaks["SDPA"], peaks["hand-written"]))
memory_ratio = peaks["hand-written"][-1] / max(peaks["SDPA"][-1], 1)

# %%
# Where it pays
# -------------
# Time first (above 1.0 SDPA is faster; the dashed line is the rule's 1.1), then memory.
fig = plot_ratios({"SDPA vs hand-written": speedups},
                  xlabel="sequence length (log scale)",
                  ylabel="hand-written time / SDPA time",
                  title=f"Attention training step, batch {batch}, {heads} heads, "
                        f"head size {head_dim}")
fig = plot_series({name: (lengths, [b / 2**20 for b in values])
                   for name, values in peaks.items()},
                  xlabel="sequence length (log scale)",
                  ylabel="peak memory above start (MiB)",
                  title="Attention training step: peak memory", device=device,
                  logx=True)

# %%
# Verdict
# -------
# The note makes a different claim per device. On CUDA: optimized kernels, improved
# performance; it holds where a fused kernel ran and SDPA is more than 10% faster at the two
# longest sequences (where the attention matrix is large), counting only points where the
# GPU, not the host, bounded the step (``about="device"``). On the CPU: "the PyTorch
# implementation", i.e. no fused kernel and nothing to gain. It holds where that is what ran.
# The sentence is already on the torch 2.0 page; the CPU gained a flash-attention kernel
# later (pytorch/pytorch pull request 103826, 2023). So the note is outdated where a fused
# kernel ran on the CPU and bought something: less peak memory at every length, or more
# than 10% speed at the two longest sequences. An interval across 1.1 is inside the noise.
RULE = ("CUDA: holds if a fused kernel ran and SDPA is >10% faster (interval above "
        "1.1) at the two longest sequences; wrong if it is below 1.1 at every length; "
        "depends otherwise. CPU: holds if no fused kernel ran; outdated if one ran and "
        "SDPA needed less peak memory at every length or was >10% faster at the two "
        "longest sequences; depends otherwise")
if device.type == "cuda":
    cases = [("holds", {"a fused kernel ran": True, "two longest": "all above"}),
             ("wrong", {"every length": "all below"}),
             ("depends", {})]
    key = speedups[-1]
else:
    cases = [("holds", {"a fused kernel ran": False}),
             ("outdated", {"a fused kernel ran": True,
                           "SDPA leaner at every length": True}),
             ("outdated", {"a fused kernel ran": True, "two longest": "all above"}),
             ("depends", {})]
    key = {"name": f"peak memory, hand-written / SDPA, sequence {lengths[-1]}",
           "value": memory_ratio, "unit": "x"}
decision = decide(device, cases,
                  groups={"two longest": speedups[-2:], "every length": speedups},
                  facts={"a fused kernel ran": fused, "SDPA kernel": ", ".join(kernels),
                         "SDPA leaner at every length": leaner,
                         "peak memory ratio, longest": round(memory_ratio, 1)},
                  key=key, about="device")
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": measurements, "skipped": []}

# %%
# When not to use it
# ------------------
# Keep the hand-written version where you need the attention weights themselves (to plot or
# regularise them): SDPA returns only the output. Where the first figure shows no gain, SDPA
# is no faster on this machine; the second figure shows what it still saves in memory. Not
# every input gets a fused kernel: masks, head sizes, dtypes and the GPU each have limits,
# and the fallback is the plain implementation, with the hand-written version's memory.
# Check which kernel ran, as above, or, as the documentation advises, allow only the fused
# backends with ``torch.nn.attention.sdpa_kernel``: a warning then says why a fused kernel
# cannot run. Mind the masks' meaning: in SDPA a boolean ``True`` marks a position that
# takes part, the opposite of ``nn.MultiheadAttention``'s ``key_padding_mask``.

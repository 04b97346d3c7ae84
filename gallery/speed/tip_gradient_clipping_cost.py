"""
What ``clip_grad_norm_`` costs per step, and what ``foreach`` changes
=====================================================================

Gradient clipping rescales all gradients so that their joint norm is at most ``max_norm``:
one norm per gradient tensor, one norm of those norms, then every gradient multiplied by
``min(1, max_norm / norm)``. Its documentation describes two implementations (claim S6-11):

    "use the faster foreach-based implementation. If ``None``, use the foreach
    implementation for CUDA and CPU native tensors and silently fall back to the slow
    implementation for other device types."

The slow implementation loops over the gradients in Python, one norm and one multiply per
tensor; the foreach one hands the whole list to one multi-tensor operator. So the difference
should grow with the number of parameter tensors, not with their size. This tip splits the
same number of weights into more and more layers, checks that both implementations clip
to the same gradients, records which one the default picks, and times two things: a whole
training step with and without clipping (what clipping costs), and the clipping call with
``foreach=False`` against ``foreach=True``.
"""
# sphinx_gallery_tips_claims = ["S6-11"]
# sphinx_gallery_tips_tags = ["training", "optimizer"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "clip_grad_norm_ costs a norm and a multiply per gradient tensor each step; its foreach path (the default on CPU and CUDA) saves per-tensor overhead."
# sphinx_gallery_tips_keywords = ["clip_grad_norm_", "gradient clipping", "clip gradients", "foreach", "max_norm", "exploding gradients", "clip_grad_norm"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html"]
# sphinx_gallery_tips_related = ["tip_foreach_fused_optimizers"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, anti-pattern time / recommended time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import compare_times, decide, plot_ratios, report


# %%
# Setup
# -----
# An MLP whose weights add up to about a fixed number (256 Ki on the CPU; on a GPU 128 Ki
# per streaming multiprocessor, 17 M on an H100 with 132 SMs), split into 2 to 128 square
# layers of a weight and a bias each: 4 to 256 gradient tensors. One CPU thread: the
# question is per-tensor overhead, not parallelism.
import math

import torch
from torch.profiler import ProfilerActivity, profile

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if device.type == "cuda":
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    total, batch = sms * 2**17, 4 * sms
else:
    total, batch = 2**18, 64
layer_counts = [2, 8, 32, 128]
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")
print(f"{total:,} weights in all, batch {batch}")


def make_model(layers):
    width = math.isqrt(total // layers)
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*blocks).to(device), width


def backward(model, width):
    x = torch.randn(batch, width, device=device)  # [batch, width]
    model.zero_grad(set_to_none=True)
    model(x).square().mean().backward()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# ``foreach=False`` forces the per-tensor loop; ``foreach=True`` the multi-tensor path
# (``foreach=None``, the default, picks it where the device supports it).
def clip_loop(params, max_norm):
    return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False)


def clip_foreach(params, max_norm):
    return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)


# %%
# Check: the same total norm and the same clipped gradients
# ---------------------------------------------------------
# ``max_norm`` is half the gradients' norm, so the clipping really rescales them; afterwards
# their norm is ``max_norm``.
model, width = make_model(8)
params = list(model.parameters())
backward(model, width)
grads = [p.grad.clone() for p in params]


def total_norm(tensors):
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t)
                                                 for t in tensors]))


norm = total_norm(grads)
max_norm = norm.item() / 2
results = {}
for name, clip in (("loop", clip_loop), ("foreach", clip_foreach)):
    for p, g in zip(params, grads):
        p.grad = g.clone()
    results[name] = (clip(params, max_norm), [p.grad.clone() for p in params])
torch.testing.assert_close(results["loop"][0], results["foreach"][0])
for a, b in zip(results["loop"][1], results["foreach"][1]):
    torch.testing.assert_close(a, b)
after = total_norm(results["foreach"][1])
print(f"total norm {norm.item():.4g}, max_norm {max_norm:.4g}, "
      f"norm after clipping {after.item():.4g}")
print("foreach=False and foreach=True return the same norm and the same gradients")

# %%
# Which implementation does the default pick here? The profiler lists the operators it ran.
with profile(activities=[ProfilerActivity.CPU]) as prof:
    torch.nn.utils.clip_grad_norm_(params, max_norm)
ops = {e.name for e in prof.events()}
default_foreach = any("_foreach_norm" in name for name in ops)
print("the default (foreach=None) ran the foreach norm:", default_foreach)

# %%
# Measurement
# -----------
# For each split of the weights: a training step (forward, backward, SGD) without and with
# ``clip_grad_norm_`` (default implementation), then the clipping call alone, with the
# loop and with foreach, on the gradients of one backward pass (after the first call they
# are already clipped; every later call still computes the norms and multiplies). The clipping
# call gets at least 12 rounds: its interval then leaves out the two slowest and two fastest
# rounds, so a stray round (another process's burst on a shared core) cannot move the
# deciding interval across 1.1 (with 6 rounds it is the whole range of the rounds). At the
# largest tensor count, the one that decides, rounds are added for up to 4 s and 60 rounds
# while the interval straddles 1.1 (0.6 s left one build beside a busy core at [0.85, 1.44]
# after 12 rounds).
costs, gains = [], []
for layers in layer_counts:
    model, width = make_model(layers)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=1e-3)
    x = torch.randn(batch, width, device=device)  # [batch, width]

    def train_step(clip):
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(params, max_norm=1.0)
        opt.step()

    tensors = len(params)
    costs.append(compare_times(
        f"step with clipping / without, {tensors} tensors",
        {"with clip_grad_norm_": lambda: train_step(True),
         "without": lambda: train_step(False)},
        threshold=1.05, device=device, x=tensors, budget_s=0.6))
    backward(model, width)
    gains.append(compare_times(
        f"foreach over loop, {tensors} tensors",
        {"foreach=False": lambda: clip_loop(params, 1.0),
         "foreach=True": lambda: clip_foreach(params, 1.0)},
        threshold=1.1, device=device, x=tensors, min_rounds=12,
        budget_s=4.0 if layers == layer_counts[-1] else 0.6, max_rounds=60))

# %%
# Where it pays
# -------------
# First the clipping call: above 1.0 foreach is faster than the loop. Then the whole step:
# how many times longer a step takes with clipping than without (above 1.0 it costs time).
fig = plot_ratios({"clip_grad_norm_: foreach vs loop": gains},
                  xlabel=f"gradient tensors ({total:,} weights in all, log scale)",
                  ylabel="loop time / foreach time",
                  title="clip_grad_norm_ alone")
fig = plot_ratios({"training step: with vs without clipping": costs},
                  xlabel=f"gradient tensors ({total:,} weights in all, log scale)",
                  ylabel="step time with clipping / without",
                  title=f"MLP training step (SGD), batch {batch}")

# %%
# Verdict
# -------
# The documentation claims two things: foreach is the faster implementation, and it is the
# default here. Faster *gains* at a tensor count when the interval of the speed-up lies above
# 1.1, and clearly does not when it lies below; in between it is inside the noise. What
# foreach saves is a launch and a Python call per tensor, so at a few tensors there is
# little to save whichever is faster: the rule decides at the largest tensor count, where
# the claim's difference is largest, and shows the others. What
# clipping costs per step is shown, not judged: it depends on how much work the step does
# besides. What foreach saves is mostly launches and Python overhead, so a point counts
# whether the host or the GPU bounds it (``about="host"``).
RULE = ("holds if the default (foreach=None) runs the foreach norm here and foreach is "
        ">10% faster than the loop (interval above 1.1) at the largest tensor count; "
        "wrong if it is clearly not (interval below 1.1) there; depends otherwise")
decision = decide(device, [("holds", {"default is foreach": True,
                                      "foreach over loop, most tensors": "all above"}),
                           ("wrong", {"foreach over loop, most tensors": "all below"}),
                           ("depends", {})],
                  groups={"foreach over loop, most tensors": gains[-1:],
                          "foreach over loop": gains,
                          "clipping cost per step": costs},
                  facts={"default is foreach": default_foreach},
                  key=gains[-1], about="host")
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# Nothing to switch off: the default already takes the foreach path on CPU and CUDA tensors.
# Pass ``foreach=False`` only for tensors whose device has no foreach kernels (the default
# falls back there by itself, and ``foreach=True`` raises). Two ways to make clipping cost
# more than it needs: ``error_if_nonfinite=True`` tests the norm with a Python ``if``, which
# on a GPU waits for it (a host-device sync every step); and a model split into many small
# tensors pays the per-tensor work however it is done. Clip only if you need to: the call
# reads every gradient twice (its norm, then the multiply) and writes it back once.

"""
``Conv2d(bias=False)`` before ``BatchNorm2d``: what the bias costs
==================================================================

The Performance Tuning Guide ("Disable bias for convolutions directly followed by a batch
norm", claim S5-1):

    "If a ``nn.Conv2d`` layer is directly followed by a ``nn.BatchNorm2d`` layer, then the
    bias in the convolution is not needed, instead use ``nn.Conv2d(..., bias=False, ....)``."

Its reason: in training mode ``BatchNorm`` subtracts each channel's mean over the batch, and a
per-channel bias only shifts that mean, so it is subtracted right back out. This tip checks
that with a bias far from zero: the outputs with and without it, the gradients, and the
gradient the bias itself receives. Then it times a training step (forward and backward) of
the block with and without the bias: the bias costs one addition over the convolution's
output in the forward pass and one reduction over it in the backward pass, so its share of a
step should be largest where the convolution itself is cheapest, with few channels. The
sweep keeps the activations' size fixed and raises the channel count.
"""
# sphinx_gallery_tips_claims = ["S5-1"]
# sphinx_gallery_tips_tags = ["module-design", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_rules = ["PTT037"]
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "A conv bias right before BatchNorm is subtracted back out (same outputs, zero gradient): drop it; the step time it saves is small, see the figure."
# sphinx_gallery_tips_keywords = ["bias=False", "Conv2d", "BatchNorm2d", "conv bias", "batch norm", "redundant bias", "parameters"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/docs/stable/generated/torch.nn.Conv2d.html", "https://docs.pytorch.org/docs/stable/generated/torch.nn.BatchNorm2d.html"]

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
# On CUDA when there is one, else on the CPU. One CPU thread: a small effect needs steady
# timings, and one thread keeps a busy machine from stalling a step.
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The same convolution, batch norm and ReLU, with the convolution's default ``bias=True``
# and with ``bias=False``.
def conv_bn(channels, bias):
    return torch.nn.Sequential(
        torch.nn.Conv2d(channels, channels, 3, padding=1, bias=bias),
        torch.nn.BatchNorm2d(channels),
        torch.nn.ReLU(),
    ).to(device)


def twins(channels):
    """Both blocks with the same convolution weights; the bias made large on purpose."""
    with_bias, without = conv_bn(channels, True), conv_bn(channels, False)
    with torch.no_grad():
        without[0].weight.copy_(with_bias[0].weight)
        with_bias[0].bias.uniform_(-3.0, 3.0)
    return with_bias, without


# %%
# Check: the bias changes nothing after BatchNorm in training mode
# ----------------------------------------------------------------
# Same input, same upstream gradient through both blocks: outputs, the input's gradient and
# the weights' gradient agree to float32 rounding, and the bias's own gradient is zero up
# to rounding (batch norm's backward removes the per-channel mean of the gradient, and the
# bias's gradient is exactly that sum).
with_bias, without = twins(16)
x = torch.randn(8, 16, 32, 32, device=device, requires_grad=True)  # [N, C, H, W]
upstream = torch.randn(8, 16, 32, 32, device=device)  # a gradient from "the rest"
outputs, grads = [], []
for block in (with_bias, without):
    out = block(x)
    (grad_x,) = torch.autograd.grad(out, x, upstream, retain_graph=True)
    out.backward(upstream)
    outputs.append(out.detach())
    grads.append((grad_x, block[0].weight.grad))
same_outputs = torch.allclose(outputs[0], outputs[1], rtol=1e-4, atol=1e-4) and all(
    torch.allclose(a, b, rtol=1e-4, atol=1e-4) for a, b in zip(*grads))
bias_grad = with_bias[0].bias.grad.abs().max().item()
weight_grad = with_bias[0].weight.grad.abs().max().item()
print(f"bias values: up to {with_bias[0].bias.abs().max().item():.2f} in magnitude")
print("outputs, input and weight gradients match with and without the bias:",
      same_outputs)
print(f"largest |gradient| of the bias: {bias_grad:.2e} "
      f"(of the weights: {weight_grad:.2e})")

# %%
# In eval mode batch norm uses its running mean instead of the batch's. That running mean is
# an average of batch means, so it learns the bias in: the two blocks' eval outputs differ
# after one training-mode pass and agree once the running mean has caught up.
with torch.no_grad():
    for passes in (1, 100):
        a, b = twins(16)
        for _ in range(passes):
            a(x), b(x)  # training-mode passes update the running statistics
        a.eval(), b.eval()
        gap = (a(x) - b(x)).abs().max().item()
        print(f"eval outputs after {passes:>3} training pass(es): "
              f"largest difference {gap:.2e}")
    # dropping the bias from a trained block: fold it into the running mean first
    a, b = twins(16)
    a(x), b(x)
    b[1].load_state_dict(a[1].state_dict())
    b[1].running_mean -= a[0].bias
    a.eval(), b.eval()
    folded = (a(x) - b(x)).abs().max().item()
    print(f"eval outputs with the bias folded into running_mean: largest difference "
          f"{folded:.2e}")

# %%
# The bias is cancelled only by a norm that subtracts a mean per channel. ``GroupNorm`` with
# 8 channels per group subtracts one mean per group, and a bias that differs between the
# channels of a group survives it:
grouped = [torch.nn.Sequential(block[0], torch.nn.GroupNorm(2, 16).to(device))
           for block in twins(16)]
with torch.no_grad():
    gap = (grouped[0](x) - grouped[1](x)).abs().max().item()
print(f"Conv2d + GroupNorm(2 groups, 16 channels): largest difference {gap:.2f}")

# %%
# Measurement
# -----------
# One timed call = one training step of the block (forward, backward, gradients cleared).
# The activations keep the same size (channels x height x width) while the channel count
# rises, so the convolution's work grows with the channels and the bias's work does not. A
# GPU needs far more work per step before kernel launches stop dominating: its batch grows
# with the number of streaming multiprocessors (SMs), two images per SM (264 on an H100 with
# 132 SMs).
if device.type == "cuda":
    batch = 2 * torch.cuda.get_device_properties(device).multi_processor_count
    shapes = [(8, 128), (32, 64), (128, 32), (512, 16)]  # (channels, side)
else:
    batch = 8
    shapes = [(4, 64), (16, 32), (64, 16), (256, 8)]
print(f"batch: {batch} images")


def train_step(block, x):
    block.zero_grad(set_to_none=True)
    block(x).sum().backward()


def timed(name, with_bias, without, x, channels):
    return compare_times(name, {"bias=True": lambda: train_step(with_bias, x),
                                "bias=False": lambda: train_step(without, x)},
                         threshold=0.9, device=device, x=channels, budget_s=1.0)


speedups, measurements, runs = [], [], {}
for channels, side in shapes:
    with_bias, without = twins(channels)
    x = torch.randn(batch, channels, side, side, device=device)  # [N, C, H, W]
    runs[channels] = (with_bias, without, x, channels)
    speedups.append(timed(f"bias=False speed-up, {channels} channels", *runs[channels]))
    for name, block in (("bias=True", with_bias), ("bias=False", without)):
        nbytes = sum(p.numel() * p.element_size() for p in block.parameters())
        measurements.append({"variant": name, "value": nbytes, "unit": "B",
                             "metric": f"parameter bytes, {channels} channels",
                             "device": device.type})
    saved = measurements[-2]["value"] - measurements[-1]["value"]
    print(f"{channels:>4} channels: bias=False saves {saved:,} of "
          f"{measurements[-2]['value']:,} parameter bytes")

# A cost shows as a ratio below 0.9. A size that looks slowest once may be noise
# (another process took the core during its rounds), so the slowest size is timed
# again, apart: it counts as a cost only if both runs say so.
lowest = min(speedups, key=lambda c: c["median"])
rerun = timed(f"{lowest['name']}, timed again", *runs[lowest["x"]])
print(f"slowest size timed again: {rerun['median']:.3f}x "
      f"[{rerun['low']:.3f}-{rerun['high']:.3f}]")

# %%
# Where it pays
# -------------
# Above 1.0 the block without the bias trains faster. The dashed line is the rule's 0.9:
# below it, dropping the bias would cost more than 10%. The single point is the slowest
# size timed again, which decides with the first run.
fig = plot_ratios({"bias=False vs bias=True": speedups,
                   "slowest size, timed again": [rerun]},
                  xlabel="channels (activations of fixed size, log scale)",
                  ylabel="time with bias / time without",
                  title=f"Conv2d 3x3 + BatchNorm2d + ReLU, training step, "
                        f"batch {batch}")

# %%
# Verdict
# -------
# The claim is that the bias is not needed: it holds when the outputs match without it and
# dropping it does not clearly cost time. The saving is small next to this machine's timing
# noise, so the rule does not ask for a gain: it asks that ``bias=False`` be clearly more
# than 10% slower (interval below 0.9) nowhere. An interval that straddles 0.9 is inside
# the noise and is not evidence of a cost, and neither is one run alone: the slowest size
# decides, in its first run and in the run apart, and the key figure is that run apart. A
# step's time counts whether the host or the GPU bounds it (``about="host"``): the question
# is whether the step gets slower, not why.
RULE = ("holds if, in training mode, the outputs after BatchNorm match with and "
        "without the conv bias and bias=False is not clearly >10% slower (interval "
        "below 0.9) at the slowest size in both its runs; wrong if the outputs differ "
        "or it is")
decision = decide(device, [("wrong", {"same outputs": False}),
                           ("wrong", {"slowest size": "all below",
                                      "slowest size, again": "all below"}),
                           ("holds", {})],
                  groups={"speed-up": speedups, "slowest size": [lowest],
                          "slowest size, again": [rerun]},
                  facts={"same outputs": same_outputs,
                         "largest bias gradient": bias_grad},
                  key=rerun, about="host")
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": measurements, "skipped": []}

# %%
# When not to use it
# ------------------
# Only where the norm subtracts a mean per channel, over the dimension the bias adds to:
# ``BatchNorm`` (in training mode; a block trained without the bias needs none in eval mode
# either), or ``GroupNorm`` with one channel per group. With several channels per group the
# bias survives (shown above), and so it does when an activation sits between the
# convolution and the norm (``Conv -> ReLU -> BatchNorm``). To drop the bias from
# a trained model, fold it into the running mean first (``running_mean -= bias``, shown
# above), or its eval-mode outputs change.

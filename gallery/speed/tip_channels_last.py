"""
``channels_last`` memory format for convolutions
================================================

The seed articles never mention memory formats. PyTorch's *Performance Tuning Guide* recommends
it for vision models ("Enable channels_last memory format for computer vision models"):

    "PyTorch 1.5 introduced support for ``channels_last`` memory format for
    convolutional networks. This format is meant to be used in conjunction with
    AMP to further accelerate convolutional neural networks with Tensor Cores."

The guide's reasoning is about GPUs with Tensor Cores, so on CUDA this tip measures it as the
guide says, under AMP (``torch.autocast`` with float16). On the CPU, AMP means bfloat16, which
is only fast on CPUs with bfloat16 instructions (see the bf16 autocast tip), so the CPU is
measured in float32, its default; oneDNN's CPU convolutions also prefer a channels-last layout
and reorder a default (NCHW) input inside every call. This tip converts a small conv stack and
its input with ``memory_format=torch.channels_last`` and times it across channel counts.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["inference", "mixed-precision"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.10"
# sphinx_gallery_tips_takeaway = "channels_last changes only strides; convert model and input once, measure on your device: the figure shows where it pays here."
# sphinx_gallery_tips_statement = "Converting a conv net and its input to channels_last makes it faster, used with AMP on GPUs with Tensor Cores (PyTorch Performance Tuning Guide)."
# sphinx_gallery_tips_keywords = ["channels_last", "memory_format", "NHWC", "Conv2d", "contiguous_format", "oneDNN", "autocast", "Tensor Cores"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/tutorials/intermediate/memory_format_tutorial.html"]

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
# Three 3x3 convolutions with ReLU, inference only. AMP (float16) on CUDA, as the guide says;
# float32 on the CPU.
import contextlib
import copy

import torch

torch.manual_seed(0)
# One CPU thread: the question is not parallelism, and one thread keeps timings
# stable on a busy machine (multi-threaded small ops stall when other processes hold
# the cores).
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
amp_dtype = {"cpu": None, "cuda": torch.float16}[device.type]
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}, "
      f"precision: {'autocast ' + str(amp_dtype) if amp_dtype else 'float32'}")

def make_model(channels):
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, channels, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.ReLU(),
    ).to(device).eval()


def infer(m, inp):
    precision = (torch.autocast(device.type, dtype=amp_dtype) if amp_dtype
                 else contextlib.nullcontext())
    with torch.inference_mode(), precision:
        return m(inp)


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# Default: NCHW (``contiguous_format``). Recommended: convert the model *and* the input;
# the conversion changes strides only, never shapes.
model = make_model(32)
model_cl = copy.deepcopy(model).to(memory_format=torch.channels_last)

x = torch.randn(8, 3, 32, 32, device=device)  # [batch, channels, height, width]
x_cl = x.to(memory_format=torch.channels_last)
print("NCHW strides:         ", x.stride())
print("channels_last strides:", x_cl.stride(), "| same shape:", x_cl.shape == x.shape)

# %%
# Check: same numbers, and the format survives the convolutions
# --------------------------------------------------------------
# The two layouts run different kernels, which round differently. In float16 (~3 significant
# digits) they agree to about 1e-2; in float32 on the CPU to 1e-4. A float32 tolerance would
# fail on CUDA even without AMP: cuDNN may run float32 convolutions in TF32
# (``torch.backends.cudnn.allow_tf32``, on by default), 10 bits of mantissa.
out, out_cl = infer(model, x), infer(model_cl, x_cl)
tol = 1e-2 if amp_dtype else 1e-4
torch.testing.assert_close(out_cl, out, rtol=tol, atol=tol)
print(f"outputs match to {tol:g} ({out.dtype}); output is channels_last:",
      out_cl.is_contiguous(memory_format=torch.channels_last))

# %%
# Measurement
# -----------
# Channel counts from few (each convolution is cheap next to reordering its input and output)
# to many (the arithmetic dominates). Speed-up = NCHW time / channels_last time. A GPU gets a
# larger batch and larger images, so that its largest sizes keep it busy.
batch, side = {"cpu": (4, 32), "cuda": (32, 56)}[device.type]
channel_counts = [8, 16, 32, 64]
speedups = []
for channels in channel_counts:
    model = make_model(channels)
    model_cl = copy.deepcopy(model).to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, side, side, device=device)  # [batch, 3, side, side]
    x_cl = x.to(memory_format=torch.channels_last)
    speedups.append(compare_times(
        f"speed-up at {channels} channels",
        {"NCHW": lambda: infer(model, x),
         "channels_last": lambda: infer(model_cl, x_cl)},
        threshold=1.0, device=device, x=channels))

# %%
# Where it pays
# -------------
# The speed-up of channels_last over NCHW at each channel count, with its interval.
fig = plot_ratios({f"channels_last vs NCHW ({out.dtype})": speedups},
                  xlabel="channels per convolution (log scale)",
                  title=f"3-conv stack forward, batch {batch}, {side}x{side} images")

# %%
# Verdict
# -------
# The guide promises a speed-up without a number, so the threshold is 1.0: channels_last is
# *faster* at a channel count when the interval of its speed-up lies above 1.0 and *slower*
# when it lies below; an interval across 1.0 is inside this machine's noise and is evidence
# neither way, so it never flips the verdict. It holds when channels_last is faster at some
# channel counts and slower at none, depends on the channel count when both happen, and is
# wrong when it is faster at none.
RULE = ("holds if channels_last is faster (interval of NCHW time / channels_last time "
        "above 1.0) at some channel count and slower (interval below 1.0) at none; "
        "depends on the channel count if both happen; wrong if it is faster at none. "
        "CUDA is measured under float16 autocast, as the guide says; the CPU in "
        "float32")
decision = decide(device, [("depends", {"faster": "any above", "slower": "any below"}),
                           ("holds", {"faster": "any above"}),
                           ("wrong", {})],
                  groups={"faster": speedups, "slower": speedups}, key=speedups[-1])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# Only 4-D (NCHW) tensors have a ``channels_last`` format (5-D: ``channels_last_3d``). Models
# that mix convolutions with ``view``/``reshape`` on the channel dimension pay for conversions
# back and forth. Convert once at model load, not per batch, and keep it only if it measures
# faster on your device, at your sizes and precision.

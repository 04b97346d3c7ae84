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
from tipsite.tipkit import calibrate, compare_times, decide, plot_ratios, report


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
# to many (the arithmetic dominates). Speed-up = NCHW time / channels_last time. On the CPU a
# batch of 4 images, 32x32. On a GPU the layout can only matter once the convolutions keep it
# busy: a data-centre GPU runs the stack on a few images in less time than the host takes to
# queue its kernels (three convolutions, three ReLUs, autocast's casts), and then only the
# launches are timed. So on CUDA the batch at each channel count is sized from this GPU's own
# rates, measured at the start (``calibrate``: its float16 matmul rate, its device copy rate,
# its host's time to launch one kernel): enough 56x56 images that the stack's arithmetic or its
# memory traffic, whichever takes longer, would take 200 launch times at those rates. Real
# convolutions reach less than a large matmul, so the GPU work is if anything longer.
side = {"cpu": 32, "cuda": 56}[device.type]
channel_counts = {"cpu": [8, 16, 32, 64], "cuda": [16, 32, 64, 128]}[device.type]
calib = calibrate(device)  # {} on the CPU


def stack_work(channels):
    """FLOPs, and float16 bytes read and written, of one image through the stack."""
    flops = 2 * 9 * side**2 * (3 * channels + 2 * channels**2)
    nbytes = 2 * side**2 * (3 + 11 * channels)
    return flops, nbytes


speedups, batches = [], []
for channels in channel_counts:
    flops, nbytes = stack_work(channels)
    batch, work = 4, None
    if calib:  # a GPU: seconds per image at its own rates, then the batch
        per_image = max(flops / calib["matmul_float16"], nbytes / calib["copy_device"])
        batch = max(1, min(4096, round(200 * calib["launch_s"] / per_image)))
        work = {"flops": batch * flops, "limit": "matmul_float16"}
    batches.append(batch)
    model = make_model(channels)
    model_cl = copy.deepcopy(model).to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, side, side, device=device)  # [batch, 3, side, side]
    x_cl = x.to(memory_format=torch.channels_last)
    speedups.append(compare_times(
        f"speed-up at {channels} channels",
        {"NCHW": lambda: infer(model, x),
         "channels_last": lambda: infer(model_cl, x_cl)},
        threshold=1.0, device=device, x=channels, work=work))
print("images per call at", channel_counts, "channels:", batches)
batch_text = str(batches[0]) if len(set(batches)) == 1 else "sized per channel count"

# %%
# Where it pays
# -------------
# The speed-up of channels_last over NCHW at each channel count, with its interval.
fig = plot_ratios({f"channels_last vs NCHW ({out.dtype})": speedups},
                  xlabel="channels per convolution (log scale)",
                  title=f"3-conv stack forward, batch {batch_text}, "
                        f"{side}x{side} images")

# %%
# Verdict
# -------
# The guide promises a speed-up without a number, so the threshold is 1.0: channels_last is
# *faster* at a channel count when the interval of its speed-up lies above 1.0 and *slower*
# when it lies below; an interval across 1.0 is inside this machine's noise and is evidence
# neither way, so it never flips the verdict. It holds when channels_last is faster at some
# channel counts and slower at none, depends on the channel count when both happen, and is
# wrong when it is faster at none. The layout is a claim about the GPU's convolution kernels:
# on CUDA a channel count at which the GPU idled half the time or more (the host's launches
# set the pace) is shown, labelled, and decides nothing (``about="device"``).
RULE = ("holds if channels_last is faster (interval of NCHW time / channels_last time "
        "above 1.0) at some channel count and slower (interval below 1.0) at none; "
        "depends on the channel count if both happen; wrong if it is faster at none. "
        "CUDA is measured under float16 autocast, as the guide says, and only channel "
        "counts that kept the GPU busy at least half the time decide; the CPU in "
        "float32")
decision = decide(device, [("depends", {"faster": "any above", "slower": "any below"}),
                           ("holds", {"faster": "any above"}),
                           ("wrong", {})],
                  groups={"faster": speedups, "slower": speedups}, key=speedups[-1],
                  about="device")
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

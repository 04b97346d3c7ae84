"""
``channels_last`` memory format for convolutions
================================================

The seed articles never mention memory formats. PyTorch's *Performance Tuning Guide* recommends
it for vision models ("Enable channels_last memory format for computer vision models"):

    "PyTorch 1.5 introduced support for ``channels_last`` memory format for
    convolutional networks. This format is meant to be used in conjunction with
    AMP to further accelerate convolutional neural networks with Tensor Cores."

The guide's reasoning is about GPUs with Tensor Cores. On CPU, oneDNN convolutions also prefer
an NHWC-like layout, and a default (NCHW) input is reordered inside every conv call. This tip
converts a small conv stack and its input with ``memory_format=torch.channels_last`` and times
it at two image sizes on the device of this build.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["inference"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.5"
# sphinx_gallery_tips_takeaway = "channels_last changes only strides; whether convolutions get faster depends on device, size and channel count: measure."
# sphinx_gallery_tips_keywords = ["channels_last", "memory_format", "NHWC", "Conv2d", "contiguous_format", "oneDNN"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/tutorials/intermediate/memory_format_tutorial.html"]

# %%
# Setup
# -----
# Three 3x3 convolutions with ReLU, 32 channels, inference only.
import copy
import statistics

import torch
import torch.utils.benchmark as benchmark

torch.manual_seed(0)
# One CPU thread: the question is not parallelism, and one thread keeps timings stable on a
# busy machine (multi-threaded small ops stall when other processes hold the cores).
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")

channels = 32
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, channels, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.ReLU(),
).to(device).eval()

# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# Default: NCHW (``contiguous_format``). Recommended: convert the model *and* the input;
# the conversion changes strides only, never shapes.
model_cl = copy.deepcopy(model).to(memory_format=torch.channels_last)

x = torch.randn(8, 3, 32, 32, device=device)  # [batch, channels, height, width]
x_cl = x.to(memory_format=torch.channels_last)
print("NCHW strides:         ", x.stride())
print("channels_last strides:", x_cl.stride(), "| same shape:", x_cl.shape == x.shape)

# %%
# Check: same numbers, and the format survives the convolutions
# --------------------------------------------------------------
with torch.inference_mode():
    out, out_cl = model(x), model_cl(x_cl)
torch.testing.assert_close(out_cl, out, rtol=1e-4, atol=1e-4)
print("outputs match; output is channels_last:",
      out_cl.is_contiguous(memory_format=torch.channels_last))

# %%
# Measurement
# -----------
# Two input sizes; the variants alternate round by round. Speed-up = NCHW time /
# channels_last time, one ratio per round.


def time_interleaved(variants, label, description, rounds=5, min_run_time=0.05):
    runs = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            timer = benchmark.Timer("fn()", globals={"fn": fn}, label=label, sub_label=name,
                                    description=description, num_threads=torch.get_num_threads())
            runs[name].append(timer.blocked_autorange(min_run_time=min_run_time))
    return runs


def infer(m, inp):
    with torch.inference_mode():
        return m(inp)


sizes = [(8, 32), (4, 96)]  # (batch, image side)
ratios, per_call, all_m = {}, {}, []
for batch, side in sizes:
    x = torch.randn(batch, 3, side, side, device=device)  # [batch, 3, side, side]
    x_cl = x.to(memory_format=torch.channels_last)
    runs = time_interleaved({"NCHW": lambda: infer(model, x),
                             "channels_last": lambda: infer(model_cl, x_cl)},
                            label="3-conv stack forward", description=f"{batch}x3x{side}x{side}")
    all_m += runs["NCHW"] + runs["channels_last"]
    ratios[side] = [a.median / b.median for a, b in zip(runs["NCHW"], runs["channels_last"])]
    for name, ms in runs.items():
        per_call[name, side] = [m.median * 1e6 for m in ms]

benchmark.Compare(all_m).print()
print("speed-up of channels_last over NCHW (median, range over rounds):")
for side, r in ratios.items():
    print(f"  {side}x{side}: {statistics.median(r):.2f}x  [{min(r):.2f} .. {max(r):.2f}]")

# %%
# Verdict
# -------
# Per size we take the middle half of the per-round speed-ups (lower to upper quartile): a size
# *gains* when even its lower quartile is above 1.10, shows *no gain* when even its upper quartile
# is below 1.10, and is *inside the noise* otherwise.
RULE = ("holds if every size gains >10% (lower quartile of the speed-up above 1.10); wrong if no "
        "size does (upper quartile below 1.10); depends otherwise, including ratios inside the noise")


def classify(r, threshold):
    """'gain' if even the lower quartile of the per-round ratios beats the threshold, 'no gain' if
    even the upper quartile misses it, 'noise' otherwise (one disturbed round cannot decide)."""
    q1, _, q3 = statistics.quantiles(r, n=4)
    return "gain" if q1 > threshold else "no gain" if q3 < threshold else "noise"


med = {side: statistics.median(r) for side, r in ratios.items()}
cls = {side: classify(r, 1.10) for side, r in ratios.items()}
if all(c == "gain" for c in cls.values()):
    verdict = "holds"
elif all(c == "no gain" for c in cls.values()):
    verdict = "wrong"
else:
    verdict = "depends"
print(f"Verdict: {verdict}. Median speed-ups: "
      + ", ".join(f"{s}x{s}: {v:.2f}x ({cls[s]})" for s, v in med.items()) + f" on {device}.")
print(f"Rule: {RULE}")

big = ratios[sizes[-1][1]]
RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": f"speed-up at {sizes[-1][1]}x{sizes[-1][1]}", "value": statistics.median(big),
            "low": min(big), "high": max(big), "unit": "x"},
    "measurements": [
        {"variant": f"{name}, {side}x{side}", "metric": "time per forward", "unit": "us",
         "value": statistics.median(us), "spread": max(us) - min(us)}
        for (name, side), us in per_call.items()
    ],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# Only 4-D (NCHW) tensors have a ``channels_last`` format (5-D: ``channels_last_3d``). Models
# that mix convolutions with ``view``/``reshape`` on the channel dimension pay for conversions
# back and forth. Convert once at model load, not per batch, and keep it only if it measures
# faster on your device.

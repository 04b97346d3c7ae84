"""
Layer and batch sizes that are multiples of 8
=============================================

The article advises sizing layers and batches in multiples of 8, "or even larger powers of two
(e.g., 64, 128 and up to 256)" (claim S1-9):

    "It’s because the Tensor Cores of Nvidia GPUs achieve the best performance for matrix
    multiplication when the matrix dimensions align to the multiples of powers of two."

Tensor Cores work on small fixed tiles, and the kernels that feed them load memory 16 bytes
(128 bits) at a time: cuBLAS can use its fastest ones only when every matrix row starts on a
16-byte boundary, i.e. when the row length (a *leading dimension*) is a multiple of 8 float16
elements. In a linear layer ``x @ W.T`` with ``x`` of shape ``[batch, in]`` and ``W``
of shape ``[out, in]``, the layer widths ``in`` and ``out`` are leading dimensions; the batch
size is only a row count. So the claim may hold for layer widths and not for batch sizes. This
tip pads each of them up to a multiple of 8, and a multiple of 8 up to a power of two, and
times a float16 linear layer before and after, on CUDA: the claim is about NVIDIA GPUs.
"""
# sphinx_gallery_tips_claims = ["S1-9"]
# sphinx_gallery_tips_tags = ["cuda", "mixed-precision"]
# sphinx_gallery_tips_devices = ["cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "On CUDA, pad odd float16 layer widths to a multiple of 8; the sweep shows whether batch sizes and powers of two matter too."
# sphinx_gallery_tips_keywords = ["tensor cores", "multiple of 8", "matmul alignment", "padding", "fp16 matmul", "layer size", "batch size"]
# sphinx_gallery_tips_docs = ["https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html"]
# sphinx_gallery_tips_rules = ["PTT032"]

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
# float16 on CUDA, a dtype Tensor Cores are built for (bfloat16, also 2 bytes an element,
# is not timed here). The CPU has no Tensor Cores: there this tip only shows what an odd
# width does to a float32 layer, and decides nothing.
import torch
import torch.nn.functional as F

torch.manual_seed(0)
# One CPU thread: on a busy shared machine a two-thread matmul can stall a whole
# scheduler slice waiting for its second thread. On CUDA the thread count is irrelevant.
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
dtype = torch.float16 if device.type == "cuda" else torch.float32
print(f"device: {device}, dtype: {dtype}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")
if device.type == "cuda":
    print("GPU:", torch.cuda.get_device_name(0))


def make_layer(n_in, n_out):
    layer = torch.nn.Linear(n_in, n_out, device=device, dtype=dtype)
    return layer.requires_grad_(False)


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The anti-pattern keeps a size that is not a multiple of 8 (an odd layer width, an odd batch
# size). The recommended pattern pads it up to the next multiple of 8 with zeros: a little more
# arithmetic, on sizes the fast kernels accept.


def round_up(n, multiple=8):
    return (n + multiple - 1) // multiple * multiple


def pad_layer(layer, multiple=8):  # recommended
    """The same layer with zero rows and columns up to multiples of ``multiple``."""
    n_out, n_in = layer.weight.shape
    padded = make_layer(round_up(n_in, multiple), round_up(n_out, multiple))
    padded.weight.copy_(F.pad(layer.weight, (0, padded.in_features - n_in,
                                             0, padded.out_features - n_out)))
    padded.bias.copy_(F.pad(layer.bias, (0, padded.out_features - n_out)))
    return padded


# anti-pattern: an odd width, checked below against the same layer padded
layer = torch.nn.Linear(1023, 1023, device=device, dtype=dtype).requires_grad_(False)

# %%
# Check: padding computes the same thing
# --------------------------------------
# Zero columns in the input meet zero columns in the weight, and zero rows of a padded batch
# give outputs that are thrown away: the first outputs are the unpadded layer's, up to the
# rounding of a different kernel.
x = torch.randn(37, 1023, device=device, dtype=dtype)  # [batch, in]: both odd
padded = pad_layer(layer)
x_padded = F.pad(x, (0, padded.in_features - 1023, 0, round_up(37) - 37))  # [40, 1024]
tol = 1e-2 if dtype == torch.float16 else 1e-5
torch.testing.assert_close(padded(x_padded)[:37, :1023], layer(x), rtol=tol, atol=tol)
print(f"Linear(1023, 1023), batch 37 == padded Linear({padded.in_features}, "
      f"{padded.out_features}), batch {x_padded.shape[0]}, cut back to [37, 1023]")

# %%
# Measurement
# -----------
# Three sweeps, each timing the unpadded size against the padded one:
#
# * layer width ``W - 1`` (odd) against ``W``, a batch of 32 rows per streaming
#   multiprocessor (SM) of the GPU;
# * batch size ``B - 1`` (odd) against ``B``, layers 4096 wide, ``B`` from 8 to 256 rows
#   per SM;
# * layer width ``W - 8`` (a multiple of 8, not of 16) against the power of two ``W``, the
#   same batch as the first sweep.
#
# A GPU needs large matmuls before the arithmetic outweighs the kernel launch: with a few
# hundred rows and layers 1024 wide, a data-centre GPU finishes the layer in about the time
# of the launch whatever its shape, so only the launch would be timed. Hence CUDA sizes
# scaled to the device (rows per SM) and layers up to 8192 wide; the smallest sizes show
# where little but the launch counts.
# The ratio is time(unpadded) / time(padded): above 1, padding pays even though it does more
# arithmetic. Each comparison states the useful work of one call, the unpadded layer's FLOPs
# (the padded one adds only zeros), so the report shows the rate each variant reached against
# this GPU's own float16 matmul rate, measured at the start of the run.


def flops(batch, n_in, n_out):  # one Linear call: a multiply-add per weight and row
    return {"flops": 2 * batch * n_in * n_out, "limit": "matmul_float16"}

speed_ups = {"odd layer width": [], "odd batch size": [],
             "multiple of 8 -> power of two": []}
if device.type == "cuda":
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    rows = 32 * sms  # a multiple of 8: only the width is odd
    for w in [1024, 2048, 4096, 8192]:
        x_odd = torch.randn(rows, w - 1, device=device, dtype=dtype)  # [batch, in]
        x_8 = torch.randn(rows, w - 8, device=device, dtype=dtype)
        x_pad = torch.randn(rows, w, device=device, dtype=dtype)
        odd, eight = make_layer(w - 1, w - 1), make_layer(w - 8, w - 8)
        pad = make_layer(w, w)
        speed_ups["odd layer width"].append(compare_times(
            f"width {w - 1} -> {w}",
            {"odd": lambda: odd(x_odd), "padded": lambda: pad(x_pad)},
            threshold=1.05, device=device, x=w, budget_s=1.5,
            work=flops(rows, w - 1, w - 1)))
        speed_ups["multiple of 8 -> power of two"].append(compare_times(
            f"width {w - 8} -> {w}",
            {"multiple of 8": lambda: eight(x_8), "power of two": lambda: pad(x_pad)},
            threshold=1.05, device=device, x=w, budget_s=1.5,
            work=flops(rows, w - 8, w - 8)))
    del odd, eight, pad, x_odd, x_8, x_pad
    square = make_layer(4096, 4096)
    for b in [8 * sms, 32 * sms, 128 * sms, 256 * sms]:
        x_odd = torch.randn(b - 1, 4096, device=device, dtype=dtype)  # [batch, in]
        x_pad = torch.randn(b, 4096, device=device, dtype=dtype)
        speed_ups["odd batch size"].append(compare_times(
            f"batch {b - 1} -> {b}",
            {"odd": lambda: square(x_odd), "padded": lambda: square(x_pad)},
            threshold=1.05, device=device, x=b, budget_s=1.5,
            work=flops(b - 1, 4096, 4096)))
    cpu_shown = []
else:
    print("A CUDA claim, and no CUDA device here: no Tensor Core timing, no verdict.")
    print("For comparison, an odd width in a float32 layer on this CPU:")
    cpu_shown = []
    for w in [64, 128, 256, 512]:
        x_odd = torch.randn(256, w - 1, device=device, dtype=dtype)  # [batch, in]
        x_pad = torch.randn(256, w, device=device, dtype=dtype)
        odd, pad = make_layer(w - 1, w - 1), make_layer(w, w)
        cpu_shown.append(compare_times(
            f"width {w - 1} -> {w}",
            {"odd": lambda: odd(x_odd), "padded": lambda: pad(x_pad)},
            threshold=1.05, device=device, x=w, budget_s=0.5, round_s=0.01))
    for c in cpu_shown:
        print(f"  {c['name']}: {c['median']:.3g}x [{c['low']:.3g} .. {c['high']:.3g}], "
              f"{len(c['ratios'])} rounds")

# %%
# Where it pays
# -------------
# Each line is one sweep: above 1.0 the padded size is faster than the unpadded one, above the
# dashed line by more than 5%.
if device.type == "cuda":
    fig = plot_ratios(speed_ups,
                      xlabel="swept size: layer width or batch size (elements)",
                      ylabel="time unpadded / time padded",
                      title="float16 Linear, padded to a multiple of 8 or to 2^k")
else:
    fig = plot_ratios({"odd layer width (float32, shown, not decided)": cpu_shown},
                      xlabel="layer width (elements), batch 256",
                      ylabel="time unpadded / time padded",
                      title="No Tensor Cores: float32 Linear, odd width padded to 8")

# %%
# Verdict
# -------
# The claim names layer sizes *and* batch sizes. Padding pays at a size when the unpadded
# layer is more than 5% slower there (interval above 1.05). The third sweep tests the
# parenthesis "or larger powers of two": it is shown, and does not decide, because the claim
# asks for multiples of 8 first. The claim is about the GPU's arithmetic, so a point at which
# the GPU idled half the time or more (the host's launches set its pace) is shown, labelled,
# and decides nothing; a sweep left without a point that kept the GPU busy makes the verdict
# "inconclusive" (``about="device"``).
RULE = ("CUDA only: holds if padding to a multiple of 8 makes the float16 layer >5% "
        "faster (interval above 1.05) at some size of both the layer-width and the "
        "batch-size sweeps; depends (on the dimension) if in one sweep only; wrong "
        "if in neither. Only sizes that kept the GPU busy at least half the time "
        "decide (host-bound ones are shown)")
if device.type == "cuda":
    decision = decide(device, [("holds", {"odd layer width": "any above",
                                          "odd batch size": "any above"}),
                               ("depends", {"odd layer width": "any above"}),
                               ("depends", {"odd batch size": "any above"}),
                               ("wrong", {})],
                      groups=speed_ups, key=speed_ups["odd layer width"][-1],
                      about="device")
    report(decision, RULE)
    RESULT = {"rule": RULE, "verdicts": {"cuda": decision}, "measurements": [],
              "skipped": []}
else:
    print("Verdict on CUDA: not measured (no CUDA device in this build).")
    print("No verdict on the CPU, which has no Tensor Cores.")
    print(f"Rule: {RULE}")
    RESULT = {"rule": RULE, "verdicts": {},
              "measurements": [{"variant": f"{c['name']}, float32 (shown, not decided)",
                                "metric": "time unpadded / time padded",
                                "value": c["median"], "spread": c["high"] - c["low"],
                                "unit": "x", "device": "cpu"} for c in cpu_shown],
              "skipped": ["float16 Tensor Core timing: needs an NVIDIA GPU, no CUDA "
                          "device in this build"]}

# %%
# When not to use it
# ------------------
# Padding costs memory, and arithmetic that computes zeros, so it pays only where the CUDA
# sweep above shows a gain: pad the dimensions whose sweep rises above the dashed line, and
# leave the others as the model needs them. A CPU has no Tensor Cores; whether its BLAS
# minds an odd width depends on the library and the size, and the CPU figure shows only
# what this machine does.

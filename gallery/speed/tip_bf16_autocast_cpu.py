"""
bfloat16 autocast for CPU inference
===================================

The seed articles discuss mixed precision only for GPUs (float16 with a gradient scaler). The
``torch.amp`` documentation also covers CPUs:

    "Some ops, like linear layers and convolutions, are much faster in `lower_precision_fp`."

    "As shown in the CPU example section of ``torch.autocast``, "automatic mixed precision
    training/inference" on CPU with datatype of `torch.bfloat16` only uses ``torch.autocast``."

Whether bfloat16 is *faster* on a CPU is decided by the hardware: CPUs with bfloat16 dot-product
instructions (x86 ``avx512_bf16`` or AMX ``amx_bf16``; Arm ``bf16``) compute it natively; the
others convert to float32 and back around every op. This tip finds out which kind of CPU it runs
on, then times a Linear-heavy model in float32 and under
``torch.autocast("cpu", dtype=torch.bfloat16)`` across batch sizes, and measures the error.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["mixed-precision", "inference"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.10"
# sphinx_gallery_tips_takeaway = "bf16 autocast on CPU pays only on CPUs with bf16 instructions (AVX512-BF16, AMX, Arm BF16) and large batches; elsewhere it is slower."
# sphinx_gallery_tips_statement = "torch.autocast('cpu', dtype=torch.bfloat16) makes linear layers much faster than float32 for CPU inference (torch.amp docs)."
# sphinx_gallery_tips_keywords = ["torch.autocast", "bfloat16", "bf16", "CPU", "AMX", "avx512_bf16", "mixed precision inference"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/amp.html"]

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
# This tip is about the CPU path, so it runs on the CPU even where a GPU exists. One thread:
# the question is not parallelism, and one thread keeps timings stable on a busy machine.
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cpu")

# Instructions that compute bfloat16 dot products natively, as
# torch.cpu.get_capabilities() (torch 2.13+) and Linux's /proc/cpuinfo name them.
BF16_INSTRUCTIONS = ("avx512_bf16", "amx_bf16", "bf16", "sve_bf16", "svebf16")


def bf16_instructions():
    """The bf16 instructions this CPU has (a list, None if unknown), and how we know."""
    if hasattr(torch.cpu, "get_capabilities"):
        caps = torch.cpu.get_capabilities()
        found = [f for f in BF16_INSTRUCTIONS if caps.get(f) is True]
        return found, "torch.cpu.get_capabilities()"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):  # x86, Arm
                    found = set(line.split(":", 1)[1].split())
                    return [f for f in BF16_INSTRUCTIONS if f in found], "/proc/cpuinfo"
    except OSError:
        pass
    return None, "not detectable here"


found, source = bf16_instructions()
bf16_hw = None if found is None else bool(found)
capability = (torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu")
              else "unknown")
print(f"device: cpu, threads: {torch.get_num_threads()}, torch {torch.__version__}, "
      f"ATen CPU capability: {capability}")
print(f"bf16 instructions ({source}):", "unknown" if found is None else found or "none")


def make_model(width, depth=4):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).eval()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# Weights stay float32; autocast runs the eligible ops (``linear``) in bfloat16, casting the
# weights on every call.
def predict_fp32(model, x):
    with torch.inference_mode():
        return model(x)


def predict_bf16(model, x):
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        return model(x)


# %%
# Check: how far off is bfloat16?
# -------------------------------
# bfloat16 keeps float32's range but only 8 bits of mantissa (~3 significant digits), so
# outputs differ; the question is by how much relative to their size.
width = 512
model = make_model(width)
x = torch.randn(64, width)  # [batch, features]
ref, low = predict_fp32(model, x), predict_bf16(model, x)
print("output dtype under autocast:", low.dtype)
max_abs = (low.float() - ref).abs().max().item()
rel = max_abs / ref.abs().max().item()
print(f"max abs error {max_abs:.3e} (relative to max |output|: {rel:.2e})")
torch.testing.assert_close(low.float(), ref, rtol=5e-2,
                           atol=5e-2 * ref.abs().max().item())

# %%
# Measurement
# -----------
# Batch sizes from one sample (the per-call weight casts dominate) to batches where the matmuls
# dominate. Speed-up = float32 time / bfloat16 autocast time.
batches = [1, 8, 64, 256]
speedups = []
for batch in batches:
    x = torch.randn(batch, width)  # [batch, features]
    speedups.append(compare_times(
        f"autocast speed-up at batch {batch}",
        {"float32": lambda: predict_fp32(model, x),
         "bf16 autocast": lambda: predict_bf16(model, x)},
        threshold=1.1, device=device, x=batch, budget_s=1.5))

# %%
# Where it pays
# -------------
# The speed-up of bfloat16 autocast over float32 at each batch size, with its interval. Above
# 1.0 bfloat16 is faster; below, the casts cost more than the bfloat16 arithmetic saves.
hw_label = "unknown" if found is None else ", ".join(found) or "none"
fig = plot_ratios({f"bf16 autocast (bf16 instructions: {hw_label})": speedups},
                  xlabel="batch size (samples, log scale)",
                  title=f"4-layer MLP forward, width {width}, on the CPU")

# %%
# Verdict
# -------
# Whether the CPU has bfloat16 instructions decides the answer, so it is part of the rule.
# On a CPU without them (or where they cannot be detected) the verdict is that it depends on
# the hardware, and the figure shows what autocast does on such a CPU. With them, bfloat16
# must gain more than 10% (interval above 1.1) at every batch size to hold; with a clear
# non-gain (interval below 1.1) at every batch size it is wrong; otherwise it depends on the
# batch size.
RULE = ("on a CPU with bf16 instructions (avx512_bf16, amx_bf16, Arm bf16): holds if "
        "bf16 autocast is >1.1x faster than float32 at every batch size (interval "
        "above 1.1), wrong if below 1.1 at every one, depends on the batch size "
        "otherwise; on a CPU without them (or unknown): depends on the hardware")
decision = decide(device, [("holds", {"bf16 hardware": True, "speed-up": "all above"}),
                           ("wrong", {"bf16 hardware": True, "speed-up": "all below"}),
                           ("depends", {})],
                  groups={"speed-up": speedups},
                  facts={"bf16 hardware": bf16_hw, "bf16 instructions": hw_label,
                         "ATen CPU capability": capability},
                  key=speedups[-1])
report(decision, RULE)
RESULT = {
    "rule": RULE,
    "verdicts": {"cpu": decision},
    "measurements": [{"variant": f"bf16 autocast, width {width}, batch 64",
                      "metric": "max abs error vs float32", "unit": "",
                      "value": max_abs, "device": "cpu"}],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# On a CPU without bfloat16 instructions keep float32: autocast only adds conversions there
# (the figure's legend names the instructions of the CPU it ran on). With them, check
# accuracy on your own outputs first: logits that are compared closely (ranking, thresholds)
# can flip at 3 significant digits, and small batches may not gain, because autocast re-casts
# every float32 weight on every call. For GPU float16 training with a gradient scaler see the
# mixed-precision tip.

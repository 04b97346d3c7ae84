"""
bfloat16 autocast for CPU inference
===================================

The seed articles discuss mixed precision only for GPUs (float16 with a gradient scaler). The
``torch.amp`` documentation also covers CPUs:

    "Some ops, like linear layers and convolutions, are much faster in `lower_precision_fp`."

    "As shown in the CPU example section of ``torch.autocast``, "automatic mixed precision
    training/inference" on CPU with datatype of `torch.bfloat16` only uses ``torch.autocast``."

Whether bfloat16 is *faster* on a CPU depends on the hardware: CPUs with ``avx512_bf16`` or AMX
(``amx_bf16``) compute bfloat16 dot products natively; others convert to float32 and may be
slower than plain float32. This tip reads the CPU's flags, times a Linear-heavy model in float32
and under ``torch.autocast("cpu", dtype=torch.bfloat16)`` at two batch sizes, and measures the
error.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["mixed-precision", "inference"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.10"
# sphinx_gallery_tips_takeaway = "bf16 autocast speeds up large-batch Linear inference on AVX512-BF16/AMX CPUs at ~1e-2 error; small batches pay per-call weight casts."
# sphinx_gallery_tips_keywords = ["torch.autocast", "bfloat16", "bf16", "CPU", "AMX", "avx512_bf16", "mixed precision inference"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/amp.html"]

# %%
# Setup
# -----
# This tip is about the CPU path, so it runs on CPU even where a GPU exists.
import statistics

import torch
import torch.utils.benchmark as benchmark

torch.manual_seed(0)
# One CPU thread: the question is not parallelism, and one thread keeps timings stable on a
# busy machine (multi-threaded small ops stall when other processes hold the cores).
torch.set_num_threads(1)
device = torch.device("cpu")


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None  # not Linux: unknown


flags = cpu_flags()
bf16_hw = None if flags is None else sorted(flags & {"avx512_bf16", "amx_bf16"})
capability = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "unknown"
print(f"device: cpu, threads: {torch.get_num_threads()}, torch {torch.__version__}, "
      f"ATen CPU capability: {capability}")
print("bfloat16 hardware flags:", bf16_hw if bf16_hw is not None else "unknown (no /proc/cpuinfo)")


def make_model(width, depth=4):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).eval()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# Weights stay float32; autocast runs the eligible ops (``linear``) in bfloat16.
def predict_fp32(model, x):
    with torch.inference_mode():
        return model(x)


def predict_bf16(model, x):
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        return model(x)


# %%
# Check: how far off is bfloat16?
# -------------------------------
# bfloat16 keeps float32's range but only 8 bits of mantissa (~3 significant digits), so outputs
# differ; the question is by how much relative to their size.
model = make_model(512)
x = torch.randn(64, 512)  # [batch, features]
ref, low = predict_fp32(model, x), predict_bf16(model, x)
print("output dtype under autocast:", low.dtype)
max_abs = (low.float() - ref).abs().max().item()
rel = max_abs / ref.abs().max().item()
print(f"max abs error {max_abs:.3e}  (relative to max |output|: {rel:.2e})")
torch.testing.assert_close(low.float(), ref, rtol=5e-2, atol=5e-2 * ref.abs().max().item())

# %%
# Measurement
# -----------
# Variants alternate round by round; speed-up = float32 time / bfloat16 time.


def time_interleaved(variants, label, description, rounds=5, min_run_time=0.05):
    runs = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            timer = benchmark.Timer("fn()", globals={"fn": fn}, label=label, sub_label=name,
                                    description=description, num_threads=torch.get_num_threads())
            runs[name].append(timer.blocked_autorange(min_run_time=min_run_time))
    return runs


width, batches = 1024, [16, 512]
model = make_model(width)
# A third variant converts the weights once. Autocast re-casts every float32 weight to bfloat16
# on every call, which matters when the batch is small.
model_bf16 = make_model(width)
model_bf16.load_state_dict(model.state_dict())
model_bf16 = model_bf16.to(torch.bfloat16)


def predict_bf16_weights(m, x):
    with torch.inference_mode():
        return m(x.to(torch.bfloat16))


all_m, ratios, per_call = [], {}, {}
for batch in batches:
    x = torch.randn(batch, width)  # [batch, width]
    runs = time_interleaved({"float32": lambda: predict_fp32(model, x),
                             "bf16 autocast": lambda: predict_bf16(model, x),
                             "bf16 weights": lambda: predict_bf16_weights(model_bf16, x)},
                            label=f"4-layer MLP forward, width {width}", description=f"batch {batch}")
    for ms in runs.values():
        all_m += ms
    ratios[batch] = [a.median / b.median for a, b in zip(runs["float32"], runs["bf16 autocast"])]
    for name, ms in runs.items():
        per_call[name, batch] = [m.median * 1e6 for m in ms]

benchmark.Compare(all_m).print()
print("speed-up of bf16 autocast over float32 (median, range over rounds):")
for batch, r in ratios.items():
    print(f"  batch {batch:4d}: {statistics.median(r):.2f}x  [{min(r):.2f} .. {max(r):.2f}]")

# %%
# Verdict
# -------
# It holds if bf16 autocast is more than 10% faster at every batch size: per batch size, a *gain*
# when even the lower quartile of the per-round speed-ups is above 1.10, *no gain* when even the
# upper quartile is below it, *inside the noise* otherwise. Where it does not hold, the reason
# matters: without bf16 hardware that is expected (depends on the CPU); with it, a gain at one
# batch size only means it depends on batch size; no gain at all means wrong.
RULE = ("holds if bf16 autocast gains >10% over float32 at every batch size (lower quartile of the "
        "speed-up above 1.10); wrong if the CPU has avx512_bf16/amx_bf16 and no batch size gains "
        "(upper quartile below 1.10); depends otherwise (no bf16 hardware, mixed, or noise)")


def classify(r, threshold):
    """'gain' if even the lower quartile of the per-round ratios beats the threshold, 'no gain' if
    even the upper quartile misses it, 'noise' otherwise (one disturbed round cannot decide)."""
    q1, _, q3 = statistics.quantiles(r, n=4)
    return "gain" if q1 > threshold else "no gain" if q3 < threshold else "noise"


med = {b: statistics.median(r) for b, r in ratios.items()}
cls = {b: classify(r, 1.10) for b, r in ratios.items()}
if all(c == "gain" for c in cls.values()):
    verdict = "holds"
elif bf16_hw and all(c == "no gain" for c in cls.values()):
    verdict = "wrong"
else:
    verdict = "depends"
print(f"Verdict: {verdict}. Speed-ups "
      + ", ".join(f"batch {b}: {v:.2f}x ({cls[b]})" for b, v in med.items())
      + f"; bf16 hardware: {bf16_hw or 'none'}; max relative error {rel:.1e}.")
print(f"Rule: {RULE}")

big = ratios[batches[-1]]
RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": f"autocast speed-up at batch {batches[-1]}", "value": statistics.median(big),
            "low": min(big), "high": max(big), "unit": "x"},
    "measurements": [
        {"variant": f"{name}, batch {b}", "metric": "time per forward", "unit": "us",
         "value": statistics.median(us), "spread": max(us) - min(us)}
        for (name, b), us in per_call.items()
    ] + [{"variant": "bf16 autocast, width 512", "metric": "max abs error vs float32",
          "unit": "", "value": max_abs}],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# Check accuracy on your own outputs first: logits that are compared closely (ranking,
# thresholds) can flip at 3 significant digits. On CPUs without bf16 instructions keep float32.
# For small-batch serving, converting the weights once (``model.to(torch.bfloat16)``) avoids
# autocast's per-call weight casts, at the cost of keeping no float32 copy.
# For GPU float16 training with a gradient scaler see the mixed-precision tip.

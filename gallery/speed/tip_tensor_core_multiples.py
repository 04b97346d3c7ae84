"""
Matrix sizes that are multiples of 8
====================================

The article advises sizing layers and batches in multiples of 8 (or larger powers of two)
(claim S1-9):

    "It’s because the Tensor Cores of Nvidia GPUs achieve the best performance for matrix
    multiplication when the matrix dimensions align to the multiples of powers of two."

Tensor Cores work on small fixed tiles, and cuBLAS picks its fastest fp16 kernels when the
leading dimensions are multiples of 8 elements (16 bytes); an odd size forces padding or a slower
kernel. A CPU has no Tensor Cores: its BLAS kernels also use register tiles and vector widths, but
handle remainders cheaply. This tip times square matmuls at an aligned size and its two odd
neighbours (``N-1``, ``N+1``) and compares *throughput* (FLOP/s), so the few percent of extra or
missing work at ``N±1`` does not count as a speed difference.
"""
# sphinx_gallery_tips_claims = ["S1-9"]
# sphinx_gallery_tips_tags = ["cuda", "mixed-precision"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.6"
# sphinx_gallery_tips_takeaway = "Multiples of 8 matter for fp16 Tensor Core matmuls on NVIDIA GPUs; float32 on CPU barely notices an off-by-one size."
# sphinx_gallery_tips_keywords = ["tensor cores", "multiple of 8", "matmul alignment", "padding", "fp16 matmul", "layer size"]
# sphinx_gallery_tips_docs = ["https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html"]

# %%
# Setup
# -----
# On CUDA: float16 matmuls (Tensor Core eligible) at N around 1024 and 4096. On CPU: float32
# (the CPU's natural matmul dtype) at N around 256 and 384, small enough to time in seconds.
import statistics

import torch
import torch.utils.benchmark as benchmark

torch.manual_seed(0)
# One thread: on a busy shared 2-core machine a two-thread matmul can stall a whole scheduler
# slice waiting for its second thread, which would swamp a few-percent effect.
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")
if device.type == "cuda":
    dtype, aligned_sizes = torch.float16, [1024, 4096]
    print("GPU:", torch.cuda.get_device_name())
else:
    dtype, aligned_sizes = torch.float32, [256, 384]
print("dtype:", dtype, "| aligned sizes:", aligned_sizes)

# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The same square matmul; only the size differs: ``N`` (a multiple of 8) versus ``N-1`` and
# ``N+1``.


def make_pair(n):
    return (torch.randn(n, n, device=device, dtype=dtype),   # [n, n]
            torch.randn(n, n, device=device, dtype=dtype))   # [n, n]


# %%
# Check: an odd size is a valid size
# ----------------------------------
# Nothing breaks at N+1; the result is the float64 product up to the dtype's rounding.
a, b = make_pair(aligned_sizes[0] + 1)
ref = (a.double() @ b.double()).to(dtype)
tol = 1e-2 if dtype == torch.float16 else 1e-3
torch.testing.assert_close(a @ b, ref, rtol=tol, atol=tol * aligned_sizes[0] ** 0.5)
print(f"{aligned_sizes[0] + 1}x{aligned_sizes[0] + 1} matmul matches a float64 reference")

# %%
# Measurement
# -----------
# For each aligned N the three sizes alternate round by round. Throughput = 2 N^3 / time. The
# alignment gain at N is throughput(N) / throughput(N±1), one ratio per neighbour and round.


def time_interleaved(variants, label, description, rounds=5, min_run_time=0.05):
    runs = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            timer = benchmark.Timer(
                "fn()", globals={"fn": fn}, label=label, sub_label=name,
                description=description, num_threads=torch.get_num_threads(),
            )
            runs[name].append(timer.blocked_autorange(min_run_time=min_run_time))
    return runs


measurements, gains, tflops = [], {}, {}
for n in aligned_sizes:
    pairs = {m: make_pair(m) for m in (n - 1, n, n + 1)}
    variants = {f"N={m}": (lambda p=pairs[m]: torch.mm(*p)) for m in pairs}
    runs = time_interleaved(variants, label=f"{dtype} matmul", description=f"around {n}")
    measurements += [m for ms in runs.values() for m in ms]
    thr = {m: [2 * m ** 3 / r.median for r in runs[f"N={m}"]] for m in pairs}  # FLOP/s per round
    for m, t in thr.items():
        tflops[m] = [v / 1e9 for v in t]  # GFLOP/s
    gains[n] = [thr[n][i] / thr[m][i] for m in (n - 1, n + 1) for i in range(len(thr[n]))]

compare = benchmark.Compare(measurements)
compare.trim_significant_figures()
compare.print()
print("throughput, GFLOP/s (median over rounds):")
for m, t in tflops.items():
    print(f"  N={m:5d}: {statistics.median(t):9.1f}")
print("alignment gain, throughput(N) / throughput(N±1) (median, range over rounds and neighbours):")
for n, g in gains.items():
    noise = " (range contains 1.0: not separable from noise)" if min(g) <= 1.0 <= max(g) else ""
    print(f"  N={n}: {statistics.median(g):.3f}x  [{min(g):.3f} .. {max(g):.3f}]{noise}")

# %%
# Verdict
# -------
# The claim is about NVIDIA Tensor Cores. On CUDA: an aligned size is "best" if its throughput
# beats its odd neighbours by more than 5% (median). On CPU there are no Tensor Cores, so the
# claim cannot hold as stated there: the verdict is "depends" (on the hardware), and the page
# reports whether alignment made any >5% difference on this CPU.
RULE = ("CUDA: holds if the median alignment gain is above 1.05 at every aligned size, wrong if at "
        "none, depends otherwise. CPU: depends (no Tensor Cores), stating whether any gain exceeded 1.05")
skipped = []
big = [n for n, g in gains.items() if statistics.median(g) > 1.05]
if device.type == "cuda":
    verdict = "holds" if len(big) == len(gains) else ("wrong" if not big else "depends")
    reason = f"sizes with a >5% gain from alignment: {big or 'none'}"
else:
    verdict = "depends"
    reason = (f"no Tensor Cores on CPU; float32 sizes with a >5% gain from alignment here: "
              f"{big or 'none'}")
    msg = "fp16 Tensor Core timing: needs an NVIDIA GPU (no CUDA device in this build)"
    print("Skipped:", msg)
    skipped.append(msg)
print(f"Verdict: {verdict}. {reason}.")
print(f"Rule: {RULE}")

key_n = aligned_sizes[-1]
RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": f"alignment gain at N={key_n} ({str(dtype).replace('torch.', '')})",
            "value": statistics.median(gains[key_n]), "low": min(gains[key_n]), "high": max(gains[key_n]),
            "unit": "x"},
    "measurements": [
        {"variant": f"N={m}, {str(dtype).replace('torch.', '')}", "metric": "throughput", "unit": "GFLOP/s",
         "value": statistics.median(t), "spread": max(t) - min(t)}
        for m, t in tflops.items()
    ],
    "skipped": skipped,
}

# %%
# When not to use it
# ------------------
# Padding a dimension to a multiple of 8 costs memory and wasted FLOPs; it pays on GPUs with
# Tensor Cores in float16/bfloat16 (and TF32). The batch size enters a linear layer's matmul as
# a dimension too, but vocabularies and hidden sizes are where padding is usually worth it. On
# CPU, choose sizes for the model, not for the BLAS library.

"""
TF32 and ``torch.set_float32_matmul_precision``: speed for precision
====================================================================

Readers ask whether one line makes float32 training faster:
``torch.set_float32_matmul_precision("high")``. Its documentation (claim S6-1) says:

    "Running float32 matrix multiplications in lower precision may significantly increase
    performance, and in some programs the loss of precision has a negligible impact."

``"highest"`` (the default) keeps float32 arithmetic. ``"high"`` allows TensorFloat32 (TF32:
10 mantissa bits, on the Tensor Cores of NVIDIA GPUs since Ampere) or a sum of two bfloat16
numbers; ``"medium"`` allows bfloat16 (7 explicitly stored mantissa bits); each only where a
fast matrix multiplication algorithm for it is available. The same page notes that the
flag "currently only affects one native device type: CUDA", yet PyTorch's CPU matmuls can
run through oneDNN, which has a bfloat16 path for CPUs with bfloat16 instructions. This tip
checks that too: it times the same float32 matmul under the three settings across sizes, on
the GPU and on the CPU, and measures each setting's error against a float64 reference.
Whether the CPU has such an algorithm is a fact the run records (does the setting change the
result at all?), not an assumption.
"""
# sphinx_gallery_tips_claims = ["S6-1"]
# sphinx_gallery_tips_tags = ["mixed-precision", "cuda", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.12"
# sphinx_gallery_tips_takeaway = "Lower float32 matmul precision pays only with a fast TF32 or bf16 path; on a CPU 'high' may change nothing and 'medium' can slow small matmuls."
# sphinx_gallery_tips_keywords = ["set_float32_matmul_precision", "TF32", "TensorFloat32", "TensorFloat-32", "allow_tf32", "matmul precision", "float32 matmul", "Tensor Cores", "enable TF32", "highest", "high", "medium", "fp32_precision", "TensorFloat32 tensor cores for float32 matrix multiplication available but not enabled"]
# sphinx_gallery_tips_errors = ["UserWarning: TensorFloat32 tensor cores for float32 matrix multiplication available but not enabled. Consider setting `torch.set_float32_matmul_precision('high')` for better performance."]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/generated/torch.set_float32_matmul_precision.html", "https://docs.pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices"]
# sphinx_gallery_tips_related = ["tip_mixed_precision", "tip_bf16_autocast_cpu", "tip_tensor_core_multiples"]

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
# On CUDA when there is one, else on the CPU. One CPU thread: the question is arithmetic
# precision, not parallelism, and one thread keeps timings steady on a busy machine.
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}, default precision: "
      f"{torch.get_float32_matmul_precision()!r}")

# Square matmuls. On a GPU the work must outgrow the kernel launch: the sizes grow
# with the number of streaming multiprocessors (1,024 to 8,192 on a 132-SM H100).
if device.type == "cuda":
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    base = max(128, 8 * sms // 128 * 128)
    sizes = [base, 4 * base, 8 * base]
else:
    sizes = [64, 128, 512, 1024]
print("matrix sizes:", sizes)


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The setting is global: it applies to every float32 matmul that follows (``@``,
# ``nn.Linear``, ``bmm``, ...), so set it once at the start of a program. Here each variant sets
# it before its matmul, so the timed calls can alternate.
def matmul_highest(a, b):  # the default: full float32 arithmetic
    torch.set_float32_matmul_precision("highest")
    return a @ b


def matmul_high(a, b):  # recommended on GPUs with TF32 Tensor Cores
    torch.set_float32_matmul_precision("high")
    return a @ b


def matmul_medium(a, b):  # bfloat16 internally, where a fast algorithm exists
    torch.set_float32_matmul_precision("medium")
    return a @ b


# %%
# Check: how far from the exact product, and does the setting change anything here?
# ---------------------------------------------------------------------------------
# Each setting against a float64 product of the same inputs, at the largest size: the mean
# absolute error relative to the mean magnitude of the result. All three must stay within 1%
# (bfloat16's precision is about 0.4%); the facts record whether "high" and "medium" change
# the result at all on this device, that is, whether a lower-precision algorithm ran.
n = sizes[-1]
a = torch.randn(n, n, device=device)  # [n, n] float32
b = torch.randn(n, n, device=device)  # [n, n] float32
exact = a.double() @ b.double()
results, errors = {}, {}
for name, fn in (("highest", matmul_highest), ("high", matmul_high),
                 ("medium", matmul_medium)):
    results[name] = fn(a, b)
    assert results[name].dtype == torch.float32  # the output stays float32
    errors[name] = ((results[name].double() - exact).abs().mean()
                    / exact.abs().mean()).item()
    print(f"{name:>8}: relative error {errors[name]:.2e}")
    assert errors[name] < 1e-2, f"{name}: error {errors[name]:.2e} is more than 1%"
facts = {f"'{name}' changes the result": not torch.equal(results[name],
                                                         results["highest"])
         for name in ("high", "medium")}
for name, value in facts.items():
    print(f"{name}: {value}")
torch.set_float32_matmul_precision("highest")
del a, b, exact, results

# %%
# Measurement
# -----------
# Speed-up = time with "highest" / time with "high" (or "medium"), one ratio per round, at
# each size. ``torch.utils.benchmark`` synchronises CUDA around the timed calls. Every size
# decides, so each gets at least 12 rounds: the interval then leaves out the two slowest and
# two fastest rounds, and a stray round (another process's burst on a shared core) cannot
# decide which side of 1.1 it lies (with 6 rounds it is the whole range of the rounds); rounds
# are added, for up to 10 s and 60 rounds a size, while the interval still straddles 1.1 or
# ends within 3% of it (6 s and 25 rounds left one build beside a busy core at [0.97, 1.08]:
# too close to 1.1 to settle).
high_gain, medium_gain = [], []
for n in sizes:
    a = torch.randn(n, n, device=device)  # [n, n] float32
    b = torch.randn(n, n, device=device)  # [n, n] float32
    for series, name, fn in ((high_gain, "high", matmul_high),
                             (medium_gain, "medium", matmul_medium)):
        series.append(compare_times(
            f"'{name}' vs 'highest', {n}x{n}",
            {"highest": lambda: matmul_highest(a, b), name: lambda: fn(a, b)},
            threshold=1.1, device=device, x=n, budget_s=10.0, min_rounds=12,
            max_rounds=60,
            work={"flops": 2 * n**3, "limit": "matmul_float32"}))
torch.set_float32_matmul_precision("highest")  # the default, for whatever runs next

# %%
# Where it pays
# -------------
# Above 1.0 the lower precision is faster; below, slower.
fig = plot_ratios({"'high'": high_gain, "'medium'": medium_gain},
                  xlabel="matrix size n (n x n @ n x n, log scale)",
                  title="float32 matmul, lower precision vs 'highest'",
                  ylabel="time with 'highest' / time with the setting")

# %%
# Verdict
# -------
# "Significantly" is read as more than 10% (interval above 1.1). Where neither lower setting
# changes a single bit of the product (the facts above), no lower-precision algorithm ran: both
# variants did the same float32 arithmetic, so the setting cannot be faster here and the claim
# is wrong on this device; the timings then show only the noise between two equal runs, and
# noise never decides. Otherwise the claim holds if one of the lower settings is that much
# faster at every size, and is wrong here only if both are clearly not (interval below 1.1)
# at every size; anything between, an interval inside the noise included, depends on the size.
# The claim is about arithmetic: on a GPU, a size where the GPU sat idle half the time (the
# host bound it) does not count.
RULE = ("wrong if neither 'high' nor 'medium' changes the float32 matmul's "
        "result at the largest size (no lower-precision algorithm ran); else holds "
        "if one of them makes it >10% faster than 'highest' at every size (interval "
        "above 1.1); wrong if both are clearly not (interval below 1.1) at every "
        "size; depends otherwise, an interval across 1.1 included; on CUDA only "
        "sizes that kept the GPU busy count")
decision = decide(device, [("wrong", {"'high' changes the result": False,
                                      "'medium' changes the result": False}),
                           ("holds", {"'high' speed-up": "all above"}),
                           ("holds", {"'medium' speed-up": "all above"}),
                           ("wrong", {"'high' speed-up": "all below",
                                      "'medium' speed-up": "all below"}),
                           ("depends", {})],
                  groups={"'high' speed-up": high_gain,
                          "'medium' speed-up": medium_gain},
                  facts=facts, about="device",
                  key=max((high_gain[-1], medium_gain[-1]), key=lambda c: c["median"]))
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": [{"variant": f"'{name}', {sizes[-1]}x{sizes[-1]}",
                            "metric": "mean error relative to float64", "unit": "",
                            "value": err, "device": device.type}
                           for name, err in errors.items()],
          "skipped": []}

# %%
# When not to use it
# ------------------
# Keep ``"highest"`` where float32's last digits matter: ill-conditioned linear algebra
# (solvers, Gram matrices, long recurrences), comparisons at float32 tolerances, and tests
# that compare against a CPU reference. The setting changes matmuls only; cuDNN convolutions
# have their own TF32 switch (``torch.backends.cudnn.allow_tf32``, on by default). On a CPU,
# measure before you set it: where no fast lower-precision algorithm exists it changes
# nothing, and small matmuls can get slower (see the figure). For larger gains on a GPU,
# train in bfloat16 or float16 with autocast (see the mixed-precision tip).

"""
``torch.compile`` fuses pointwise ops: where it pays
====================================================

The seed articles never mention ``torch.compile``. PyTorch's *Performance Tuning Guide*
recommends it for chains of pointwise operations ("Fuse operations"):

    "Pointwise operations such as elementwise addition, multiplication, and math
    functions like `sin()`, `cos()`, `sigmoid()`, etc., can be combined into a
    single kernel. This fusion helps reduce memory access and kernel launch times."

    "In the simplest case fusion can be enabled by applying
    `torch.compile` decorator to the function definition"

The guide's own example is a hand-written GELU. Eager mode runs its five ops as five passes
over memory; Inductor generates one C++ (on CPU) or Triton (on CUDA) loop. Two costs come
with it: a one-off compile, and a per-call overhead (checking that the compiled code still
applies) that eager mode does not have. On a small tensor that overhead can outweigh the
saving; on a large one the saved memory passes dominate. This tip measures the compile once
and the steady-state speed across tensor sizes, to show where compiling pays.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["compile"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "torch.compile's fused loop wins on large pointwise chains; on small tensors its per-call overhead can lose; the first call pays the compile time (see figures)."
# sphinx_gallery_tips_statement = "Pointwise operations can be combined into a single kernel by applying torch.compile; this fusion helps reduce memory access and kernel launch times."
# sphinx_gallery_tips_keywords = ["torch.compile", "inductor", "kernel fusion", "pointwise", "compile time", "gelu"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html"]

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
# On CUDA when there is one, else on the CPU. One CPU thread: the question is fusion, not
# parallelism, and one thread keeps timings steady on a busy machine.
import math
import statistics
import textwrap
import timeit

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

# Tensor sizes (float32 elements) from a few KiB, where per-call overhead is all there
# is, to tens of MiB or more, where memory traffic dominates. A GPU moves memory far
# faster, so its sweep reaches larger tensors, sized from its own copy rate, measured at
# the start (``calibrate``): eager GELU reads and writes 44 bytes per element (five
# ops), and the largest size is the first power of two at which that traffic takes 1 ms
# at that rate; the one below it is 8 times smaller.
if device.type == "cuda":
    calib = calibrate(device)
    top = 2 ** math.ceil(math.log2(1e-3 * calib["copy_device"] / 44))
    sizes = [1 << 12, 1 << 16, max(top >> 3, 1 << 17), max(top, 1 << 20)]
else:
    sizes = [1 << 12, 1 << 16, 1 << 20, 1 << 22]


def sync():
    if device.type == "cuda":
        torch.cuda.synchronize()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The same Python function, run eagerly (one kernel per op) and compiled (one fused kernel).
# On the CPU ``dynamic=True`` compiles one kernel for every tensor length, so the sweep below
# compiles once instead of once per size. On CUDA ``dynamic=False``: static shapes, one
# kernel per size specialised to its length, as a loop whose shapes never change gets; each
# size compiles on its first call, before it is timed.
def gelu(x):
    return x * 0.5 * (1.0 + torch.erf(x / 1.41421))


gelu_compiled = torch.compile(gelu, dynamic=device.type == "cpu")

# %%
# Compile time, measured once
# ---------------------------
# The first call traces, compiles and runs (making ``gelu_compiled`` above already imported
# the compiler, which takes seconds too). ``torch.utils.benchmark`` warms a statement up
# before timing it, and that warm-up *is* the compile here, so this one call is timed with
# the standard library's ``timeit`` (one run). Inductor caches compiled code on disk, so a
# second run of this script compiles faster than the first.
x = torch.randn(sizes[0], device=device)  # [elements]
compile_error = None
try:
    compile_s = timeit.timeit(lambda: (gelu_compiled(x), sync()), number=1)
    print(f"first call (trace, compile, run): {compile_s:.2f} s")
except Exception as err:  # no C++ compiler, no Triton for this GPU, ...
    compile_error = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
    compile_s = None
    print(textwrap.fill(f"torch.compile failed on this machine: {compile_error}", 88))

# %%
# Check: same numbers
# -------------------
# Fusion changes no formula, but the generated code may vectorise ``erf`` differently: a
# float32 tolerance is the honest comparison.
if compile_error is None:
    for n in (sizes[0], sizes[-1]):
        x = torch.randn(n, device=device)  # [elements]
        torch.testing.assert_close(gelu_compiled(x), gelu(x))
    print(f"compiled matches eager at {sizes[0]:,} and {sizes[-1]:,} elements")

# %%
# Measurement
# -----------
# Speed-up = eager time / compiled time at each size. The two smallest sizes ask "is compiled
# at most 10% slower than eager where little but overhead counts?" (threshold 0.9); the
# larger ones ask "does compiling gain more than 10%?" (threshold 1.10). On a GPU each
# comparison states the least memory traffic the function needs, reading ``x`` and writing
# the result (8 bytes per element), so the report shows how much of this GPU's measured copy
# rate each variant reached.
speedups, measurements, skipped = [], [], []
if compile_error is None:
    for n in sizes:
        x = torch.randn(n, device=device)  # [elements]
        speedups.append(compare_times(
            f"speed-up at {n:,} elements",
            {"eager": lambda: gelu(x), "compiled": lambda: gelu_compiled(x)},
            threshold=0.9 if n in sizes[:2] else 1.10, device=device, x=n,
            budget_s=1.5,
            work={"bytes": 8 * n, "limit": "copy_device"} if device.type == "cuda"
            else None))
    large = speedups[-1]
    eager_s = statistics.median(large["base"])
    compiled_s = statistics.median(large["cand"])
    saved_s = eager_s - compiled_s
    print(f"at {sizes[-1]:,} elements: eager {eager_s * 1e6:,.0f} us, "
          f"compiled {compiled_s * 1e6:,.0f} us per call (medians)")
    if saved_s > 0:
        print(f"the {compile_s:.1f} s compile is paid back after "
              f"~{compile_s / saved_s:,.0f} calls of that size")
    measurements.append({"variant": "compiled", "metric": "first call (compile)",
                         "value": compile_s, "unit": "s", "device": device.type})
else:
    skipped.append(f"compiled timing: torch.compile failed here ({compile_error})")

# %%
# Where it pays
# -------------
# The speed-up of the compiled function over eager mode at each tensor size, with its
# interval.
if speedups:
    fig = plot_ratios({"compiled vs eager GELU": speedups},
                      xlabel="tensor size (float32 elements)",
                      ylabel="eager time / compiled time",
                      title="GELU as 5 pointwise ops: eager vs torch.compile")

# %%
# Verdict
# -------
# The guide's advice holds where compiling pays on large tensors (more than 10% faster at the
# largest size) and costs little on small ones (at most 10% slower at the two smallest, and
# measured so). It depends on the size where it pays on large tensors only, and on the
# platform where ``torch.compile`` cannot run. It is wrong if even the largest tensor gains
# less than 10%. An interval inside the noise is no evidence: not a gain at the largest
# size, not a small cost at the small ones. The claim is about both sides of a GPU: the small
# tensors' cost is the host's per-call overhead (``about`` says "host" for them, so they count
# however idle the GPU was), the large tensor's gain is the memory traffic fusion saves, work on
# the GPU: a large size at which the GPU idled half the time or more is shown, labelled, and
# decides nothing.
RULE = ("holds if compiled is >10% faster at the largest size (interval above 1.10) "
        "and at most 10% slower at the two smallest (intervals above 0.9); wrong if "
        "below 1.10 at the largest size; depends otherwise, or if torch.compile fails. "
        "On CUDA the small sizes are judged as host overhead; the largest decides only "
        "if it kept the GPU busy at least half the time")
cases = [("depends", {"torch.compile runs here": False}),
         ("holds", {"large tensor": "all above", "small tensors": "all above"}),
         ("wrong", {"large tensor": "all below"}),
         ("depends", {})]
facts = {"torch.compile runs here": compile_error is None}
if speedups:
    groups = {"small tensors": speedups[:2], "in between": speedups[2:-1],
              "large tensor": speedups[-1:]}
    decision = decide(device, cases, groups=groups, facts=facts, key=speedups[-1],
                      about={"small tensors": "host", "in between": "host",
                             "large tensor": "device"})
else:
    decision = decide(device, cases, facts=facts)
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": measurements, "skipped": skipped}

# %%
# When not to use it
# ------------------
# Skip it for code that runs a handful of times (scripts, one-off evaluation): the compile
# takes longer than the eager run. Where the figure shows small tensors losing, per-call
# overhead dominates: compile larger regions (a whole model step) rather than one small
# function. With the default ``dynamic=None`` a second input shape costs a second compile
# (after which the shape is treated as dynamic); ``dynamic=True``, as on the CPU here,
# compiles for any length from the start, and ``dynamic=False``, as on CUDA here, compiles
# once per shape. This tip times a pointwise chain only: matmuls and convolutions
# already call tuned libraries, so expect less from compiling them.

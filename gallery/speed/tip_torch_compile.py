"""
``torch.compile`` fuses pointwise ops: compile time versus steady-state speed
=============================================================================

The seed articles never mention ``torch.compile``. PyTorch's *Performance Tuning Guide*
recommends it for chains of pointwise operations ("Fuse operations"):

    "Pointwise operations such as elementwise addition, multiplication, and math
    functions like `sin()`, `cos()`, `sigmoid()`, etc., can be combined into a
    single kernel. This fusion helps reduce memory access and kernel launch times."

    "In the simplest case fusion can be enabled by applying
    `torch.compile` decorator to the function definition"

The guide's own example is a hand-written GELU. Eager mode runs its five ops as five passes
over memory; Inductor generates one C++ (on CPU) or Triton (on CUDA) loop. The price is a
one-off compile, which on a small CPU takes seconds. This tip measures both: the compile time
once, and the steady-state speed of every later call, and from them the number of calls after
which compiling pays off.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["compile"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "torch.compile fuses a pointwise chain into one loop: faster per call, but the first call pays seconds of compile time."
# sphinx_gallery_tips_keywords = ["torch.compile", "inductor", "kernel fusion", "pointwise", "compile time", "gelu"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html"]

# %%
# Setup
# -----
# A 1M-element float32 tensor (4 MiB): big enough that memory traffic, which fusion saves,
# dominates the call.
import statistics
import timeit

import torch
import torch.utils.benchmark as benchmark

torch.manual_seed(0)
# One CPU thread: the question is not parallelism, and one thread keeps timings stable on a
# busy machine (multi-threaded small ops stall when other processes hold the cores).
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")

x = torch.randn(1 << 20, device=device)  # [1_048_576]


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The same Python function, run eagerly (one kernel per op) and compiled (one fused kernel).
def gelu(x):
    return x * 0.5 * (1.0 + torch.erf(x / 1.41421))


gelu_compiled = torch.compile(gelu, dynamic=False)


def sync():
    if device.type == "cuda":
        torch.cuda.synchronize()


# %%
# Compile time, measured once
# ---------------------------
# The first call traces, compiles and runs. ``torch.utils.benchmark`` always warms a statement
# up before timing it, and that warm-up *is* the compile here, so this single call is timed
# with the standard library's ``timeit`` (one run, ``number=1``). Inductor caches compiled
# code on disk, so a second process compiles faster than a fresh machine does.
compile_error = None
try:
    compile_s = timeit.timeit(lambda: (gelu_compiled(x), sync()), number=1)
    print(f"first call (trace + compile + run): {compile_s:.2f} s")
except Exception as err:  # no C++ compiler, unsupported platform, ...
    compile_error = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    compile_s = None
    print("torch.compile failed on this machine:", compile_error)

# %%
# Check: same numbers
# -------------------
# Fusion reorders nothing mathematically, but the generated code may vectorise ``erf``
# differently; a float32 tolerance is the honest comparison.
if compile_error is None:
    eager_out, compiled_out = gelu(x), gelu_compiled(x)
    torch.testing.assert_close(compiled_out, eager_out)
    max_err = (compiled_out - eager_out).abs().max().item()
    print(f"compiled matches eager (max abs difference {max_err:.2e})")

# %%
# Steady-state measurement
# ------------------------
# Eager and compiled calls alternate round by round, so a busy moment on a shared machine hits
# both. Speed-up = eager time / compiled time, one ratio per round.


def time_interleaved(variants, label, description, rounds=5, min_run_time=0.05):
    runs = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            timer = benchmark.Timer("fn(); sync()", globals={"fn": fn, "sync": sync}, label=label,
                                    sub_label=name, description=description,
                                    num_threads=torch.get_num_threads())
            runs[name].append(timer.blocked_autorange(min_run_time=min_run_time))
    return runs


measurements, skipped = [], []
if compile_error is None:
    runs = time_interleaved({"eager": lambda: gelu(x), "compiled": lambda: gelu_compiled(x)},
                            label="GELU, 1M elements", description=str(device))
    benchmark.Compare(runs["eager"] + runs["compiled"]).print()
    ratios = [e.median / c.median for e, c in zip(runs["eager"], runs["compiled"])]
    eager_us = [m.median * 1e6 for m in runs["eager"]]
    comp_us = [m.median * 1e6 for m in runs["compiled"]]
    speedup = statistics.median(ratios)
    saved_us = statistics.median(eager_us) - statistics.median(comp_us)
    # Calls needed before the compile time is paid back by the per-call saving.
    break_even = compile_s * 1e6 / saved_us if saved_us > 0 else float("inf")
    print(f"speed-up of compiled over eager: {speedup:.2f}x  [{min(ratios):.2f} .. {max(ratios):.2f}]")
    print(f"compile time {compile_s:.2f} s; saving {saved_us:.0f} us per call; "
          f"pays off after ~{break_even:,.0f} calls")
    measurements = [
        {"variant": "eager", "metric": "time per call", "unit": "us",
         "value": statistics.median(eager_us), "spread": max(eager_us) - min(eager_us)},
        {"variant": "compiled", "metric": "time per call", "unit": "us",
         "value": statistics.median(comp_us), "spread": max(comp_us) - min(comp_us)},
        {"variant": "compiled", "metric": "first call (compile)", "unit": "s", "value": compile_s},
    ]
else:
    skipped.append(f"torch.compile timing: compile failed ({compile_error})")

# %%
# Verdict
# -------
# The guide's advice holds here if the compiled function is faster by more than 10%: even the
# lower quartile of the per-round speed-ups must be above 1.10 (one noisy round cannot decide).
# It is wrong if even the upper quartile is below 1.10, inside the noise otherwise. It is never
# free: the compile time above is the price, and the break-even count says when it is paid back.
RULE = ("holds if compile works and the steady-state speed-up gains >10% (lower quartile above "
        "1.10); wrong if the upper quartile is below 1.10; depends if inside the noise or compile "
        "fails on this machine")
if compile_error is not None:
    verdict = "depends"
    print("Verdict: depends. torch.compile could not run here:", compile_error)
else:
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    verdict = "holds" if q1 > 1.10 else "wrong" if q3 < 1.10 else "depends"
    print(f"Verdict: {verdict}. Speed-up {speedup:.2f}x (quartiles {q1:.2f} .. {q3:.2f}) after a "
          f"{compile_s:.1f} s compile (break-even after ~{break_even:,.0f} calls).")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": None if compile_error else {"name": "steady-state speed-up", "value": speedup,
                                       "low": min(ratios), "high": max(ratios), "unit": "x"},
    "measurements": measurements,
    "skipped": skipped,
}

# %%
# When not to use it
# ------------------
# Skip it for code that runs a handful of times (scripts, one-off evaluation): the compile
# takes longer than the eager run. Shapes that change every call trigger recompiles
# (``dynamic=True`` or padding to fixed sizes helps). Large matmuls and convolutions already
# call optimised libraries, so compile gains most on chains of small pointwise ops like this one.

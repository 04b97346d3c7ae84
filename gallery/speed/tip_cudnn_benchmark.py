"""
``torch.backends.cudnn.benchmark``: fixed versus changing input sizes
=====================================================================

The article recommends ``torch.backends.cudnn.benchmark = True`` and adds a caveat (claim S1-10):

    "WARNING: it's recommended when the input size doesn't change often, otherwise might hurt the
    performance."

With the flag on, the first convolution of every new input shape makes cuDNN try several
algorithms and cache the fastest for that shape. That costs time once per shape and can pay off
on every later call with the same shape. The flag only steers cuDNN, so it can only matter for
convolutions on CUDA (and ROCm's MIOpen); CPU convolutions never read it. This tip times a small
conv net with the flag off and on: on CUDA for a fixed shape (steady state) and for a stream of
new shapes (autotuning every call); on CPU, to show the flag does nothing there.
"""
# sphinx_gallery_tips_claims = ["S1-10"]
# sphinx_gallery_tips_tags = ["cuda", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.0"
# sphinx_gallery_tips_takeaway = "cudnn.benchmark autotunes per input shape on CUDA: a win for fixed shapes, a cost for ever-changing ones, a no-op on CPU."
# sphinx_gallery_tips_keywords = ["cudnn.benchmark", "cudnn", "torch.backends.cudnn.benchmark", "autotune", "convolution speed", "dynamic shapes"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/backends.html#torch.backends.cudnn.benchmark"]

# %%
# Setup
# -----
import itertools
import statistics

import torch
import torch.utils.benchmark as benchmark

torch.manual_seed(0)
# One thread: on a busy shared 2-core machine a two-thread convolution can stall a whole
# scheduler slice waiting for its second thread, which would swamp a ~1.0 ratio.
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")
print("cuDNN available:", torch.backends.cudnn.is_available(),
      "| benchmark flag at start:", torch.backends.cudnn.benchmark)

net = torch.nn.Sequential(
    torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(32, 16, 3, padding=1),
).to(device).eval()

# %%
# The two settings
# ----------------
# The same forward pass, with the global flag set before the call.


def forward_with(flag: bool, x):
    torch.backends.cudnn.benchmark = flag
    with torch.no_grad():
        return net(x)


# %%
# Check: the flag changes speed, not the answer (up to algorithm rounding)
# ------------------------------------------------------------------------
x = torch.randn(8, 3, 32, 32, device=device)  # [batch, channels, height, width]
# cuDNN convolutions may use TF32 (torch.backends.cudnn.allow_tf32 defaults to True), and two
# algorithms round differently, so CUDA gets a TF32-sized tolerance.
tol = 5e-3 if device.type == "cuda" else 1e-5
torch.testing.assert_close(forward_with(False, x), forward_with(True, x), rtol=tol, atol=tol)
print("outputs match with benchmark False and True")


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


# %%
# Measurement 1: a fixed input shape
# ----------------------------------
# Warm both settings first so autotuning (benchmark=True) is already cached; then the rounds
# time the steady state. Speed-up = time with False / time with True. ``torch.utils.benchmark``
# synchronises CUDA around each timed block.
shape = (16, 3, 64, 64)
x = torch.randn(*shape, device=device)  # [batch, channels, height, width]
for flag in (False, True):
    forward_with(flag, x)
runs = time_interleaved(
    {"benchmark=False": lambda: forward_with(False, x), "benchmark=True": lambda: forward_with(True, x)},
    label="3-conv net forward", description=f"fixed {shape}",
)
fixed_ratios = [f.median / t.median for f, t in zip(runs["benchmark=False"], runs["benchmark=True"])]
measurements = runs["benchmark=False"] + runs["benchmark=True"]
per_call = {(name, "fixed shape"): [m.median * 1e6 for m in ms] for name, ms in runs.items()}
compare = benchmark.Compare(measurements)
compare.trim_significant_figures()
compare.print()
fixed = statistics.median(fixed_ratios)
print(f"fixed shape: speed-up of benchmark=True {fixed:.3f}x "
      f"[{min(fixed_ratios):.3f} .. {max(fixed_ratios):.3f}]")

# %%
# Measurement 2: a new input shape on every call (CUDA only)
# ----------------------------------------------------------
# Each call takes the next unseen spatial size, so with benchmark=True every call autotunes.
# The two settings take alternate sizes (even for False, odd for True) from the same range, so
# neither profits from the other's cache and both do nearly the same amount of work.
# Slow-down = time per call with True / time per call with False.
skipped = []
varying = None
if torch.cuda.is_available():
    sizes = {False: itertools.count(40, 2), True: itertools.count(41, 2)}

    def new_shape_call(flag):
        h = next(sizes[flag])
        return forward_with(flag, torch.randn(4, 3, h, h, device=device))

    var_runs = {False: [], True: []}
    for _ in range(3):
        for flag in (False, True):
            t = benchmark.Timer("fn(flag)", globals={"fn": new_shape_call, "flag": flag},
                                label="3-conv net, new shape each call", sub_label=f"benchmark={flag}")
            var_runs[flag].append(t.timeit(8))  # timeit also makes a few warm-up calls: all new shapes
    var_ratios = [t.median / f.median for f, t in zip(var_runs[False], var_runs[True])]
    varying = statistics.median(var_ratios)
    for flag, ms in var_runs.items():
        per_call[f"benchmark={flag}", "new shape each call"] = [m.median * 1e6 for m in ms]
    print(f"new shape each call: benchmark=True is {varying:.2f}x the time of False "
          f"[{min(var_ratios):.2f} .. {max(var_ratios):.2f}]")
else:
    msg = "changing-shape timing: cuDNN autotuning needs CUDA (no CUDA device in this build)"
    print("Skipped:", msg)
    skipped.append(msg)

torch.backends.cudnn.benchmark = False  # the default, for whatever runs next

# %%
# Verdict
# -------
# On CUDA the claim has two halves: a gain for a fixed shape (speed-up above 1.05) and a loss
# for changing shapes (benchmark=True slower by more than 5% per new shape). On CPU the flag is
# never read, so a ratio near 1.0 is the expected result and the claim can only "depend" on
# having cuDNN: the verdict there says so and reports whether 1.0 lies inside the range of the
# per-round ratios, i.e. whether any effect stood out from this machine's noise.
RULE = ("CUDA: holds if benchmark=True is >1.05x faster for a fixed shape and >1.05x slower per new "
        "shape; depends if only one half shows; wrong if neither. CPU: depends (cuDNN flag unused "
        "on CPU), noting whether 1.0 lies within the range of per-round on/off ratios")
if varying is not None:
    halves = [fixed > 1.05, varying > 1.05]
    verdict = "holds" if all(halves) else ("depends" if any(halves) else "wrong")
    reason = f"fixed-shape speed-up {fixed:.2f}x, new-shape slow-down {varying:.2f}x"
else:
    verdict = "depends"
    in_noise = min(fixed_ratios) <= 1.0 <= max(fixed_ratios)
    reason = (f"on CPU the flag is unused: median on/off ratio {fixed:.3f}x, per-round range "
              f"[{min(fixed_ratios):.2f} .. {max(fixed_ratios):.2f}] "
              f"{'contains 1.0 (no effect beyond noise)' if in_noise else 'excludes 1.0 (a drift between rounds, not cuDNN)'}"
              "; the claim needs cuDNN")
print(f"Verdict: {verdict}. {reason}.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": "fixed-shape speed-up of benchmark=True", "value": fixed,
            "low": min(fixed_ratios), "high": max(fixed_ratios), "unit": "x"},
    "measurements": [
        {"variant": f"{name}, {case}", "metric": "time per forward", "unit": "us",
         "value": statistics.median(us), "spread": max(us) - min(us)}
        for (name, case), us in per_call.items()
    ],
    "skipped": skipped,
}

# %%
# When not to use it
# ------------------
# Leave the flag off when shapes vary from batch to batch (variable-length sequences, multi-scale
# training, a last batch of a different size adds one extra autotune, which is harmless) and when
# you need run-to-run reproducibility: autotuning may pick different algorithms on different runs
# (see ``torch.backends.cudnn.deterministic``). On CPU there is nothing to gain.

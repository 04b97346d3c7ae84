"""
``torch.from_numpy`` shares memory, ``torch.tensor`` copies
===========================================================

The article's eighth tip (claim S1-8):

    "Use `torch.from_numpy(numpy_array)` and `torch.as_tensor(others)` instead of
    `torch.tensor`. If both the source device and target device are CPU, `torch.from_numpy`
    and `torch.as_tensor` may not create data copies."

``torch.tensor`` always copies its data. ``torch.from_numpy`` never does: the tensor is a view
of the array's buffer. ``torch.as_tensor`` shares when it can (same dtype, same device, a buffer
to share) and copies otherwise. This tip shows when each shares, then times the three on
arrays from a hundred to a million elements.
"""
# sphinx_gallery_tips_claims = ["S1-8"]
# sphinx_gallery_tips_tags = ["numpy", "data-loading"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.0"
# sphinx_gallery_tips_takeaway = "from_numpy/as_tensor wrap a NumPy array without copying; torch.tensor always copies, so its cost grows with the array."
# sphinx_gallery_tips_keywords = ["from_numpy", "as_tensor", "torch.tensor", "numpy to tensor", "zero-copy", "shares memory", "np.shares_memory"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.from_numpy.html", "https://pytorch.org/docs/stable/generated/torch.as_tensor.html"]

# %%
# Setup
# -----
# The claim is about CPU memory, so this tip runs on CPU whatever the machine has; moving to a
# GPU is a copy by definition. One thread: the question is copy or no copy, not parallelism, and
# a single thread keeps small calls from stalling on a busy machine.
import numpy as np
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
print(f"device: cpu, threads: {torch.get_num_threads()}, torch {torch.__version__}, numpy {np.__version__}")


def shares(array, tensor):
    """True when the tensor's data lies in the array's buffer."""
    return np.shares_memory(array, tensor.numpy())


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
array = np.arange(6, dtype=np.float32)  # [6]
copied = torch.tensor(array)      # anti-pattern: always a copy
viewed = torch.from_numpy(array)  # a view of the array's buffer
as_t = torch.as_tensor(array)     # a view too: same dtype, same device

# %%
# Check: same values, and who sees a write
# ----------------------------------------
torch.testing.assert_close(copied, viewed)
torch.testing.assert_close(as_t, viewed)
array[0] = 100.0
print(f"after array[0] = 100: torch.tensor -> {copied[0].item():g}, "
      f"from_numpy -> {viewed[0].item():g}, as_tensor -> {as_t[0].item():g}")
viewed[1] = -1.0  # and the other way round
print(f"after tensor[1] = -1 via from_numpy: array[1] = {array[1]:g}")
assert viewed.data_ptr() == array.__array_interface__["data"][0]
assert copied[0] == 0 and viewed[0] == as_t[0] == 100 and array[1] == -1

# When ``as_tensor`` (or ``from_numpy``) has to copy, or cannot share at all:
cases = {
    "as_tensor(list)": (None, torch.as_tensor([0.0, 1.0, 2.0])),  # no buffer to share
    "as_tensor(array, dtype=float64)": (array, torch.as_tensor(array, dtype=torch.float64)),
    "as_tensor(array[::2])": (array, torch.as_tensor(array[::2])),  # strided view: shared
}
sharing = {}
for name, (src, tensor) in cases.items():
    sharing[name] = src is not None and shares(src, tensor)
    print(f"{name:<34} shares the array's memory: {sharing[name]}")
assert sharing == {"as_tensor(list)": False, "as_tensor(array, dtype=float64)": False,
                   "as_tensor(array[::2])": True}
try:
    torch.from_numpy(array[::-1])
except ValueError as err:
    print("from_numpy(array[::-1]) raises ValueError:", str(err).split(".")[0])
else:
    raise AssertionError("expected negative strides to be rejected")

# %%
# Measurement
# -----------
# The three conversions, interleaved round by round with ``torch.utils.benchmark``. Speed-up =
# torch.tensor time / from_numpy time, one ratio per round.
import statistics

import torch.utils.benchmark as benchmark


def time_interleaved(variants, label, description, rounds=5, min_run_time=0.05):
    """Time each variant once per round, alternating; return {name: [Measurement, ...]}."""
    runs = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            timer = benchmark.Timer(
                "fn()", globals={"fn": fn}, label=label, sub_label=name,
                description=description, num_threads=torch.get_num_threads(),
            )
            runs[name].append(timer.blocked_autorange(min_run_time=min_run_time))
    return runs


sizes = [100, 10_000, 1_000_000]
measurements, ratios, as_ratios, per_call = [], {}, {}, {}
for n in sizes:
    src = np.random.default_rng(0).standard_normal(n, dtype=np.float32)  # [n]
    runs = time_interleaved(
        {"torch.tensor": lambda: torch.tensor(src),
         "torch.from_numpy": lambda: torch.from_numpy(src),
         "torch.as_tensor": lambda: torch.as_tensor(src)},
        label="NumPy float32 array -> tensor", description=f"{n:,} elements",
    )
    ratios[n] = [t.median / f.median for t, f in zip(runs["torch.tensor"], runs["torch.from_numpy"])]
    as_ratios[n] = [t.median / a.median for t, a in zip(runs["torch.tensor"], runs["torch.as_tensor"])]
    for name, ms in runs.items():
        measurements += ms
        per_call[name, n] = [m.median * 1e6 for m in ms]  # microseconds, one per round

compare = benchmark.Compare(measurements)
compare.trim_significant_figures()
compare.print()
print("speed-up over torch.tensor (median, range over rounds):")
for n, r in ratios.items():
    a = as_ratios[n]
    print(f"  {n:>9,} elements: from_numpy {statistics.median(r):8.1f}x [{min(r):.1f} .. {max(r):.1f}]"
          f"   as_tensor {statistics.median(a):8.1f}x [{min(a):.1f} .. {max(a):.1f}]")

# %%
# Verdict
# -------
# Per size we take the middle half of the per-round speed-ups (lower to upper quartile), so one
# disturbed round on a shared machine cannot decide.
RULE = ("holds if from_numpy and as_tensor share the array's memory and from_numpy is more than "
        "1.5x faster than torch.tensor at every size (lower quartile of the speed-up above 1.5); "
        "depends if only at some sizes, or inside the noise; wrong if they copy or are never faster")
faster, slower, noisy = [], [], []
for n, r in ratios.items():
    q1, _, q3 = statistics.quantiles(r, n=4)
    (faster if q1 > 1.5 else slower if q3 < 1.5 else noisy).append(n)
shared = shares(array, viewed) and shares(array, as_t) and not shares(array, copied)
if shared and len(faster) == len(sizes):
    verdict = "holds"
elif not shared or len(slower) == len(sizes):
    verdict = "wrong"
else:
    verdict = "depends"
print(f"Verdict: {verdict}. Shares memory: {shared}. More than 1.5x faster at "
      f"{[f'{n:,}' for n in faster] or 'none'} elements; not at {[f'{n:,}' for n in slower] or 'none'}; "
      f"inside the noise at {[f'{n:,}' for n in noisy] or 'none'}.")
print(f"Rule: {RULE}")

# The key figure is the middle size: at a million elements the copy's cost swings with page
# faults and machine load (see the range above), which would make the headline ratio unstable.
middle = ratios[sizes[1]]
RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": f"from_numpy speed-up at {sizes[1]:,} elements", "value": statistics.median(middle),
            "low": min(middle), "high": max(middle), "unit": "x"},
    "measurements": [
        {"variant": f"{name}, {n:,} elements", "metric": "time per conversion", "unit": "us",
         "value": statistics.median(us), "spread": max(us) - min(us)}
        for (name, n), us in per_call.items()
    ],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# ``as_tensor`` shares too but checks more cases per call, so on small arrays it saves less than
# ``from_numpy`` (compare the rows above); for a NumPy array, ``from_numpy`` is the direct call.
# Sharing is the point and the risk: writes to the array show in the tensor and back, and the
# array stays alive as long as the tensor. Use ``torch.tensor`` (or ``.clone()``) when you want
# an independent copy. ``from_numpy`` rejects negative strides (``array[::-1]``) and warns on
# read-only arrays. On the way to a GPU, ``torch.as_tensor(array, device="cuda")`` copies anyway;
# pinned memory and ``non_blocking=True`` are what speed that copy up.

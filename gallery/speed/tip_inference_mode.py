"""
``inference_mode()`` versus ``no_grad()``
=========================================

The article says ``torch.inference_mode()`` beats ``torch.no_grad()`` by 5-10%, and more as
models grow (claim S0-5):

    "no_grad() mode contains additional heads, like version_counting and view tracking of
    tensors, that increase the computation head by 5-10%."

Both modes switch off graph recording. ``inference_mode`` also skips version counters and view
metadata on the tensors it creates. That saving is per tensor, not per FLOP, so it should
matter most when ops are small and cheap. This tip measures it at several model widths.
"""
# sphinx_gallery_tips_claims = ["S0-5"]
# sphinx_gallery_tips_tags = ["autograd", "inference"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "inference_mode saves a fixed cost per op: visible on tiny ops, lost in the noise on large ones."
# sphinx_gallery_tips_keywords = ["inference_mode", "no_grad", "torch.inference_mode", "evaluation speed"]

# %%
# Setup
# -----
# One small MLP per width. The device is CUDA when there is one, else CPU. One CPU thread: the
# claim is about per-tensor bookkeeping, not parallelism, and a single thread keeps small ops
# from stalling on a busy machine, so figures from different runs compare.
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")


def make_model(width: int, depth: int = 8) -> torch.nn.Module:
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).to(device).eval()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
def predict_no_grad(model, x):
    with torch.no_grad():
        return model(x)


def predict_inference_mode(model, x):
    with torch.inference_mode():
        return model(x)


# %%
# Check: same numbers, one real difference
# ----------------------------------------
# Both give identical outputs. The difference is what you may do with the result afterwards:
# a tensor made under ``inference_mode`` cannot be saved for backward later.
model = make_model(64)
x = torch.randn(32, 64, device=device)  # [batch, features]
a, b = predict_no_grad(model, x), predict_inference_mode(model, x)
torch.testing.assert_close(a, b, rtol=0, atol=0)
print("outputs identical:", torch.equal(a, b))
print("is_inference():   no_grad ->", a.is_inference(), "| inference_mode ->", b.is_inference())

w = torch.ones(64, device=device, requires_grad=True)
try:
    (b * w).sum().backward()
except RuntimeError as err:
    print("using the inference tensor in autograd raises:", str(err).splitlines()[0])
else:
    raise AssertionError("expected a RuntimeError for an inference tensor saved for backward")

# %%
# Measurement
# -----------
# ``torch.utils.benchmark`` times each variant; the two variants alternate, round after round,
# so a slow moment on a shared machine hits both. Speed-up = no_grad time / inference_mode time,
# one ratio per round; we report the median ratio and its range across rounds.
import statistics

import torch.utils.benchmark as benchmark


def time_interleaved(variants, label, description, rounds=7, min_run_time=0.05):
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


widths = [8, 64, 512]
batch = 16
measurements, ratios, per_call = [], {}, {}
for width in widths:
    model = make_model(width)
    x = torch.randn(batch, width, device=device)
    runs = time_interleaved(
        {"no_grad": lambda: predict_no_grad(model, x),
         "inference_mode": lambda: predict_inference_mode(model, x)},
        label="8-layer MLP forward", description=f"width {width}",
    )
    ratios[width] = [ng.median / im.median for ng, im in zip(runs["no_grad"], runs["inference_mode"])]
    measurements += runs["no_grad"] + runs["inference_mode"]
    for name, ms in runs.items():
        per_call[name, width] = [m.median * 1e6 for m in ms]  # microseconds, one per round

compare = benchmark.Compare(measurements)
compare.trim_significant_figures()
compare.print()

print("speed-up of inference_mode over no_grad (median, range over rounds):")
for width, r in ratios.items():
    print(f"  width {width:4d}: {statistics.median(r):5.3f}x  [{min(r):.3f} .. {max(r):.3f}]")

# %%
# Verdict
# -------
# The claim promises at least 5%. Per width we take the middle half of the per-round speed-ups
# (lower to upper quartile): a width *gains* when even its lower quartile is above 1.05, shows
# *no gain* when even its upper quartile is below 1.05, and is *inside the noise* otherwise.
# Quartiles rather than the extremes, so one disturbed round on a shared machine cannot decide.
RULE = ("holds if every width gains >5% (lower quartile of the speed-up above 1.05); wrong if no "
        "width does (upper quartile below 1.05); depends otherwise, including ratios inside the noise")
gain, no_gain, noisy = [], [], []
for width, r in ratios.items():
    q1, _, q3 = statistics.quantiles(r, n=4)
    (gain if q1 > 1.05 else no_gain if q3 < 1.05 else noisy).append(width)
if len(gain) == len(widths):
    verdict = "holds"
elif len(no_gain) == len(widths):
    verdict = "wrong"
else:
    verdict = "depends"
print(f"Verdict: {verdict}. >5% gain at widths {gain or 'none'}; no 5% gain at {no_gain or 'none'}; "
      f"inside the noise at {noisy or 'none'}.")
print(f"Rule: {RULE}")

smallest = ratios[widths[0]]
RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": f"speed-up at width {widths[0]}", "value": statistics.median(smallest),
            "low": min(smallest), "high": max(smallest), "unit": "x"},
    "measurements": [
        {"variant": f"{name}, width {width}", "metric": "time per forward", "unit": "us",
         "value": statistics.median(us), "spread": max(us) - min(us)}
        for (name, width), us in per_call.items()
    ],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# Use ``inference_mode`` for pure inference. Keep ``no_grad`` when the outputs may later meet
# autograd (e.g. targets computed from a frozen model during training, or tensors you modify in
# place and then differentiate): inference tensors raise an error there, as shown above.

"""
Anomaly detection: switch it on to find a NaN, off to train
===========================================================

The seed articles never mention autograd's anomaly mode. PyTorch's *Performance Tuning Guide*
("Disable debugging APIs") lists it first:

    "Many PyTorch APIs are intended for debugging and should be disabled for
    regular training runs:"

    "anomaly detection: torch.autograd.detect_anomaly or torch.autograd.set_detect_anomaly(True)"

Anomaly mode records a Python stack trace for every op in the forward pass and checks every
backward output for NaN. That is exactly what you want while hunting a NaN, and pure overhead
otherwise. This tip shows what it catches and measures what it costs per training step.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["tracking", "training", "autograd"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.0"
# sphinx_gallery_tips_takeaway = "detect_anomaly names the backward op that made a NaN, but slows every training step: use it to debug, never leave it on."
# sphinx_gallery_tips_keywords = ["torch.autograd.detect_anomaly", "set_detect_anomaly", "anomaly mode", "NaN", "debugging", "SqrtBackward0"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/docs/stable/autograd.html#anomaly-detection"]

# %%
# Setup
# -----
import statistics
import warnings

import torch
import torch.utils.benchmark as benchmark

torch.manual_seed(0)
# One CPU thread: the question is not parallelism, and one thread keeps timings stable on a
# busy machine (multi-threaded small ops stall when other processes hold the cores).
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")

# %%
# What it catches
# ---------------
# ``sqrt`` at 0 has an infinite derivative; multiplied by a zero upstream gradient it becomes
# NaN. Without anomaly mode the NaN lands silently in ``.grad``.
x = torch.tensor([0.0, 4.0], device=device, requires_grad=True)
(torch.sqrt(x) * torch.tensor([0.0, 1.0], device=device)).sum().backward()
print("without anomaly mode: x.grad =", x.grad.tolist(), "(no error)")

x.grad = None
caught_op = None
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with torch.autograd.detect_anomaly():
        try:
            (torch.sqrt(x) * torch.tensor([0.0, 1.0], device=device)).sum().backward()
        except RuntimeError as err:
            caught_op = str(err).splitlines()[0]
assert caught_op is not None, "anomaly mode should raise on the NaN"
print("with anomaly mode:    RuntimeError:", caught_op)
for w in caught:
    first = str(w.message).splitlines()[0]
    print(f"  {w.category.__name__}: {first[:150]}")

# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The same training step; the anti-pattern leaves anomaly mode switched on.


def make_step(width, depth=4):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.randn(32, width, device=device)  # [batch, width]

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(data).square().mean()
        loss.backward()
        opt.step()
        return loss

    return step


def with_anomaly(step):
    def run():
        with torch.autograd.set_detect_anomaly(True), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return step()
    return run


# %%
# Check: the step computes the same loss either way
# -------------------------------------------------
torch.manual_seed(1)
plain_loss = make_step(64)().item()
torch.manual_seed(1)
anomaly_loss = with_anomaly(make_step(64))().item()
assert plain_loss == anomaly_loss
print("same loss with and without anomaly mode:", plain_loss)
assert not torch.is_anomaly_enabled(), "anomaly mode must be off again after the context"

# %%
# Measurement
# -----------
# One timed statement = one training step (forward, backward, SGD update). Variants alternate
# round by round; slowdown = anomaly time / plain time. The overhead is per op, so it is
# largest where ops are small.


def sync():
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_interleaved(variants, label, description, rounds=5, min_run_time=0.05):
    runs = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            timer = benchmark.Timer("fn(); sync()", globals={"fn": fn, "sync": sync}, label=label,
                                    sub_label=name, description=description,
                                    num_threads=torch.get_num_threads())
            runs[name].append(timer.blocked_autorange(min_run_time=min_run_time))
    return runs


widths = [32, 512]
all_m, slowdowns, per_call = [], {}, {}
for width in widths:
    step = make_step(width)
    runs = time_interleaved({"anomaly off": step, "anomaly on": with_anomaly(step)},
                            label="training step", description=f"width {width}")
    all_m += runs["anomaly off"] + runs["anomaly on"]
    slowdowns[width] = [on.median / off.median for off, on in zip(runs["anomaly off"], runs["anomaly on"])]
    for name, ms in runs.items():
        per_call[name, width] = [m.median * 1e6 for m in ms]

benchmark.Compare(all_m).print()
print("slowdown with anomaly mode on (median, range over rounds):")
for width, r in slowdowns.items():
    print(f"  width {width:4d}: {statistics.median(r):.2f}x  [{min(r):.2f} .. {max(r):.2f}]")

# %%
# Verdict
# -------
# The advice (switch it off for training) holds if anomaly mode slows the step by more than 10%
# at every width. Per width the middle half of the per-round slowdowns decides: *costly* when
# even the lower quartile is above 1.10, *free* when even the upper quartile is below it, *inside
# the noise* otherwise.
RULE = ("holds if anomaly mode costs >10% at every width (lower quartile of the slowdown above "
        "1.10); wrong if at no width (upper quartile below 1.10); depends otherwise, including noise")


def classify(r, threshold):
    """'gain' if even the lower quartile of the per-round ratios beats the threshold, 'no gain' if
    even the upper quartile misses it, 'noise' otherwise (one disturbed round cannot decide)."""
    q1, _, q3 = statistics.quantiles(r, n=4)
    return "gain" if q1 > threshold else "no gain" if q3 < threshold else "noise"


med = {w: statistics.median(r) for w, r in slowdowns.items()}
cls = {w: classify(r, 1.10) for w, r in slowdowns.items()}
if all(c == "gain" for c in cls.values()):
    verdict = "holds"
elif all(c == "no gain" for c in cls.values()):
    verdict = "wrong"
else:
    verdict = "depends"
print(f"Verdict: {verdict}. Anomaly mode costs "
      + ", ".join(f"{v:.2f}x at width {w}" + ("" if cls[w] == "gain" else f" ({cls[w]})") for w, v in med.items())
      + f"; it caught: {caught_op}")
print(f"Rule: {RULE}")

small = slowdowns[widths[0]]
RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": f"slowdown at width {widths[0]}", "value": statistics.median(small),
            "low": min(small), "high": max(small), "unit": "x"},
    "measurements": [
        {"variant": f"{name}, width {w}", "metric": "time per step", "unit": "us",
         "value": statistics.median(us), "spread": max(us) - min(us)}
        for (name, w), us in per_call.items()
    ],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# Turn it on for the few steps around a NaN (``with torch.autograd.detect_anomaly():``), read
# the op it names and the forward traceback it prints, then turn it off. The same guide lists
# the other debugging APIs to keep out of normal runs: ``torch.autograd.profiler.profile``,
# ``torch.autograd.profiler.emit_nvtx`` and ``gradcheck``/``gradgradcheck``; the profiler is
# for a few measured steps, not a whole training run.

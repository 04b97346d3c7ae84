"""
Anomaly detection: switch it on to find a NaN, off to train
===========================================================

The seed articles never mention autograd's anomaly mode. PyTorch's *Performance Tuning Guide*
("Disable debugging APIs") lists it first (claim S5-3):

    "Many PyTorch APIs are intended for debugging and should be disabled for regular training runs"

and first among them "anomaly detection: torch.autograd.detect_anomaly or
torch.autograd.set_detect_anomaly(True)". (tip_debugging_apis_off measures the others.)

Anomaly mode records a Python stack trace for every op in the forward pass and checks every
backward output for NaN. That is exactly what you want while hunting a NaN, and overhead
otherwise. The stack traces cost the same per op whatever its size; the NaN checks read every
gradient, so they grow with the model. This tip shows what anomaly mode catches and measures
what it costs per training step, from tiny layers to wide ones.
"""
# sphinx_gallery_tips_claims = ["S5-3"]
# sphinx_gallery_tips_tags = ["tracking", "training", "autograd"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "detect_anomaly names the backward op that made a NaN; its stack traces and NaN checks can slow training steps (see the figure): debug with it, train without."
# sphinx_gallery_tips_keywords = ["torch.autograd.detect_anomaly", "set_detect_anomaly", "anomaly mode", "NaN", "debugging", "SqrtBackward0"]
# sphinx_gallery_tips_errors = ["UserWarning: Anomaly Detection has been enabled. This mode will increase the runtime and should only be enabled for debugging."]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/docs/stable/autograd.html#anomaly-detection"]
# sphinx_gallery_tips_rules = ["PTT034"]

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
# One CPU thread: the question is not parallelism, and one thread keeps timings stable on a
# busy machine.
import warnings

import torch
from torch.utils.benchmark import Timer

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

# %%
# What it catches
# ---------------
# ``sqrt`` at 0 has an infinite derivative; multiplied by a zero upstream gradient it becomes
# NaN. Without anomaly mode the NaN lands silently in ``.grad``.
x = torch.tensor([0.0, 4.0], device=device, requires_grad=True)
mask = torch.tensor([0.0, 1.0], device=device)
(torch.sqrt(x) * mask).sum().backward()
print("without anomaly mode: x.grad =", x.grad.tolist(), "(no error)")

x.grad = None
caught_op = None
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with torch.autograd.detect_anomaly():
        try:
            (torch.sqrt(x) * mask).sum().backward()
        except RuntimeError as err:
            caught_op = str(err).splitlines()[0]
assert caught_op is not None, "anomaly mode should raise on the NaN"
print("with anomaly mode:    RuntimeError:", caught_op)
for w in caught:
    print(f"  {w.category.__name__}: {str(w.message).splitlines()[0][:70]}")


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The same training step; the anti-pattern leaves anomaly mode switched on.
def make_step(width, batch=32, depth=4):  # recommended: the plain step
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width, device=device), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.randn(batch, width, device=device)  # [batch, width]

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(data).square().mean()
        loss.backward()
        opt.step()
        return loss

    return step


def with_anomaly(step):  # anti-pattern
    def run():
        with torch.autograd.set_detect_anomaly(True):
            return step()
    return run


# %%
# Check: the step computes the same loss either way
# -------------------------------------------------
# Anomaly mode warns each time it is switched on; the warning is silenced from here on.
warnings.filterwarnings("ignore", message="Anomaly Detection has been enabled")
torch.manual_seed(1)
plain_loss = make_step(64)()
torch.manual_seed(1)
anomaly_loss = with_anomaly(make_step(64))()
torch.testing.assert_close(plain_loss, anomaly_loss, rtol=0, atol=0)
print("same loss with and without anomaly mode:", plain_loss.item())
assert not torch.is_anomaly_enabled(), "anomaly mode must be off after the context"

# %%
# Measurement
# -----------
# One timed statement is one training step (forward, backward, SGD update) of a 4-layer MLP
# at widths from tiny (per-op overhead dominates) to wide (arithmetic dominates): batch 32 on
# the CPU. A GPU needs far more work before its work, not the host's, sets the pace of a step:
# there the batch is 32 rows per streaming multiprocessor (SM), and the widths come from two
# measurements of this run: the *anomaly* step's time at width 64, where the GPU has almost
# nothing to do (the host's time per step with anomaly mode's own host work, the larger of
# the two), and this GPU's float32 matmul rate (``calibrate``). A step's matmuls grow with
# ``width**2``; the widths make them take 2, 4, 16 and 64 times that host time at that rate
# (at most 128 per SM wide), so that at every width the GPU's work, not the host's, can set
# the pace of both steps: a width sized to the plain step's host time alone would leave the
# anomaly step host-bound, and decide nothing.
if device.type == "cuda":
    calib = calibrate(device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    batch = 32 * sms
    host_s = Timer("step()", globals={"step": with_anomaly(make_step(64, batch))}
                   ).blocked_autorange(min_run_time=0.2).median
    per_width2 = 6 * 4 * batch / calib["matmul_float32"]  # seconds, fwd + bwd matmuls

    def width_for(seconds):  # a multiple of 64 whose matmuls take that long
        return min(128 * sms, max(64, 64 * round((seconds / per_width2) ** 0.5 / 64)))

    widths = sorted({width_for(k * host_s) for k in (2, 4, 16, 64)})
    print(f"anomaly step at width 64, batch {batch}: {host_s * 1e3:.3g} ms; "
          f"widths: {widths}")
else:
    batch, widths = 32, [16, 64, 256, 512]
slowdowns = []
for width in widths:
    step = make_step(width, batch)
    slowdowns.append(compare_times(
        f"slowdown at width {width}",
        {"anomaly mode on": with_anomaly(step), "anomaly mode off": step},
        threshold=1.10, device=device, x=width, budget_s=1.5,
        work={"flops": 6 * 4 * batch * width**2, "limit": "matmul_float32"}))

# %%
# Where it costs
# --------------
# The slowdown of a training step with anomaly mode on, at each width, with its interval.
fig = plot_ratios({"anomaly mode on vs off": slowdowns},
                  xlabel="layer width (features)", ylabel="step time, anomaly on / off",
                  title=f"4-layer MLP training step, batch {batch}")

# %%
# Verdict
# -------
# The advice (switch it off for training) holds if anomaly mode slows the step by more than
# 10% at every width: the interval of the slowdown lies above 1.10. Inside the noise or below
# counts as not costly at that width. On a GPU the question is whether it slows a training
# run whose GPU work sets the pace: a width at which the GPU idled half the time or more is
# shown, labelled, and decides nothing (``about="device"``).
RULE = ("holds if anomaly mode slows a training step by >10% at every width (interval "
        "above 1.10); wrong if at no width; depends otherwise. On CUDA only widths "
        "at which the plain and the anomaly step kept the GPU busy at least half the "
        "time decide")
decision = decide(device, [("holds", {"slowdown": "all above"}),
                           ("wrong", {"slowdown": "none above"}),
                           ("depends", {})],
                  groups={"slowdown": slowdowns}, facts={"NaN caught in": caught_op},
                  key=slowdowns[-1], about="device")
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# Turn it on for the few steps around a NaN (``with torch.autograd.detect_anomaly():``), read
# the op it names and the forward traceback it prints, then turn it off. The same guide lists
# the other debugging APIs to keep out of normal runs: ``torch.autograd.profiler.profile``,
# ``torch.autograd.profiler.emit_nvtx`` and ``gradcheck``/``gradgradcheck``; the profiler is
# for a few measured steps, not a whole training run.

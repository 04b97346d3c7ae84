"""
Profiler and gradcheck: debugging tools, not part of a training run
===================================================================

PyTorch's *Performance Tuning Guide*, "Disable debugging APIs" (claim S5-3):

    "Many PyTorch APIs are intended for debugging and should be disabled for regular training
    runs"

It names anomaly detection (which has its own tip), the profilers
(``torch.autograd.profiler.profile``, whose current form is ``torch.profiler.profile``, and
``emit_nvtx``) and ``torch.autograd.gradcheck``/``gradgradcheck``. This tip shows what the two
measurable ones are for, then what they cost when left in a training loop: a profiler that
records every op of every step, against the plain step, from tiny layers to wide ones; the
``record_function`` labels that profiles are read by, left in the code with no profiler
running; and ``gradcheck``, which checks a backward against finite differences, against the
forward and backward it checks.
"""
# sphinx_gallery_tips_claims = ["S5-3"]
# sphinx_gallery_tips_tags = ["tracking", "profiling", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "A profiler left on slows every training step, small ones most; gradcheck costs many forward+backward passes: profile a few steps, gradcheck in tests."
# sphinx_gallery_tips_keywords = ["torch.profiler", "profiler overhead", "record_function", "gradcheck", "gradgradcheck", "debugging APIs", "emit_nvtx", "disable debugging", "training slow", "GradcheckError", "Jacobian mismatch"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/docs/stable/profiler.html", "https://docs.pytorch.org/docs/stable/generated/torch.autograd.gradcheck.gradcheck.html"]
# sphinx_gallery_tips_related = ["tip_anomaly_detection_off", "tip_profile_low_gpu_utilization"]

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
# One CPU thread: the costs are per op, and one thread keeps timings stable on a busy machine.
# The profiler records the CPU and, where this build can, the GPU's kernels.
import torch
from torch import nn
from torch.profiler import profile, record_function, supported_activities

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
activities = supported_activities() if device.type == "cuda" else None
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")


def make_step(width, depth=4, batch=32, labels=False):
    """One training step (forward, backward, SGD) of an MLP of ``depth`` layers."""
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.randn(batch, width, device=device)  # [batch, width]

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(data).square().mean()
        loss.backward()
        opt.step()
        return loss

    def labelled_step():  # the same step with record_function labels
        with record_function("zero_grad"):
            opt.zero_grad(set_to_none=True)
        with record_function("forward"):
            loss = model(data).square().mean()
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            opt.step()
        return loss

    return labelled_step if labels else step


# %%
# What they are for
# -----------------
# The profiler, on a few steps, says where the time goes. ``record_function`` labels parts of
# the step so that the table (or a trace) shows them by name.
step = make_step(64, labels=True)
with profile(activities=activities) as prof:
    for _ in range(3):
        step()
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=8))
labels_found = {e.key for e in prof.key_averages()} >= {"forward", "backward"}
events_per_step = len(prof.events()) / 3
print(f"profiler events recorded per step: {events_per_step:.0f}")


# %%
# ``gradcheck`` compares a backward with finite differences of the forward, in float64. It
# passes a correct function and catches a wrong backward, here a hand-written square whose
# backward forgot the factor 2. ``check_undefined_grad=False`` skips one of its checks (that a
# backward accepts missing output gradients), which built-in ops pass by construction; keep
# it on for your own ``autograd.Function``.
class BuggySquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x  # wrong: d(x*x)/dx = 2x


x64 = torch.randn(4, 3, dtype=torch.float64, device=device, requires_grad=True)
passes = torch.autograd.gradcheck(lambda t: torch.tanh(t) * t, (x64,),
                                  check_undefined_grad=False)
caught = None
try:
    torch.autograd.gradcheck(BuggySquare.apply, (x64,))
except RuntimeError as err:  # torch.autograd.gradcheck.GradcheckError
    caught = f"{type(err).__name__}: {str(err).splitlines()[0]}"
print("gradcheck on a correct function:", passes)
print("gradcheck on the wrong backward:", caught)
assert passes and caught is not None


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# Anti-pattern: the training loop runs inside a profiler that records every op of every step.
# Recommended: the plain loop (profile a few steps when you need to, with a ``schedule``). A
# timed call is 10 steps, so the profiler's start and stop, which a real run pays once, are
# spread over them. ``record_function`` labels without an active profiler are timed the same
# way against the unlabelled step.
STEPS = 10


def profiled(step):
    def run():
        with profile(activities=activities):
            for _ in range(STEPS):
                step()
    return run


def plain(step):
    def run():
        for _ in range(STEPS):
            step()
    return run


# %%
# Check: the profiler changes nothing the step computes
# -----------------------------------------------------
torch.manual_seed(1)
plain_loss = make_step(64)()
torch.manual_seed(1)
with profile(activities=activities):
    profiled_loss = make_step(64)()
torch.testing.assert_close(plain_loss, profiled_loss, rtol=0, atol=0)
print("same loss with and without the profiler:", plain_loss.item())

# %%
# Measurement
# -----------
# The profiler and ``record_function`` across layer widths (4-layer MLP, batch 32 on the CPU;
# on a GPU, 32 rows and 2 to 16 features per streaming multiprocessor (SM), from
# launch-bound steps to steps where the arithmetic dominates). ``gradcheck`` of a linear
# layer and ``tanh`` with respect to its input, weight and bias (batch 8), across features,
# against one forward and backward of the same function.
if device.type == "cuda":
    sm = torch.cuda.get_device_properties(device).multi_processor_count
    batch, widths = 32 * sm, [sm * k for k in (2, 4, 8, 16)]
else:
    batch, widths = 32, [16, 32, 64, 128]
profiler_cost, label_cost = [], []
for width in widths:
    step = make_step(width, batch=batch)
    profiler_cost.append(compare_times(
        f"profiler on / off, width {width}",
        {"profiler on": profiled(step), "profiler off": plain(step)},
        threshold=1.10, device=device, x=width, budget_s=0.5, min_rounds=12,
        busy=False))  # "profiler on" runs a profiler itself: profilers do not nest
    if width == widths[0]:  # labels: the smallest width, where a fixed cost weighs most
        labelled = make_step(width, batch=batch, labels=True)
        label_cost.append(compare_times(
            f"record_function labels / none, no profiler, width {width}",
            {"labels": plain(labelled), "no labels": plain(step)},
            threshold=1.10, device=device, x=width, budget_s=0.5))

def layer(t, weight, bias):
    return torch.tanh(nn.functional.linear(t, weight, bias))


gradcheck_cost = []
for n in [1, 2, 4, 8]:
    inputs = tuple(torch.randn(*shape, dtype=torch.float64, device=device,
                               requires_grad=True) for shape in ((8, n), (n, n), (n,)))

    def check(inputs=inputs):
        torch.autograd.gradcheck(layer, inputs, check_undefined_grad=False)

    def forward_backward(inputs=inputs):
        for t in inputs:
            t.grad = None
        layer(*inputs).sum().backward()

    gradcheck_cost.append(compare_times(
        f"gradcheck / forward+backward, {n} features",
        {"gradcheck": check, "forward+backward": forward_backward},
        threshold=10.0, device=device, x=n, budget_s=0.4, min_rounds=12))

skipped = ["torch.autograd.profiler.emit_nvtx: not measured on this machine: needs "
           "CUDA and an NVIDIA Nsight Systems (nsys) run to record its ranges"]
print("Skipped:", skipped[0])

# %%
# Where it costs
# --------------
# The profiler's cost per training step, and that of labels with no profiler running.
fig = plot_ratios({"profiler on vs off": profiler_cost,
                   "record_function labels vs none (no profiler)": label_cost},
                  xlabel="layer width (features)", ylabel="step time, with / without",
                  title=f"4-layer MLP training step, batch {batch}")

# %%
# ``gradcheck`` against the forward and backward it checks: it evaluates the forward twice per
# element of every input (finite differences) and the backward at least once per output
# element, so its cost grows with the inputs, here with the square of the features.
fig = plot_ratios({"gradcheck vs one forward+backward": gradcheck_cost},
                  xlabel="features (batch 8)",
                  ylabel="time, gradcheck / forward+backward",
                  title="gradcheck of tanh(linear(x, weight, bias)), float64")

# %%
# Verdict
# -------
# The advice (keep debugging APIs out of regular training) holds if a profiler left on slows
# a training step by more than 10% at every width (interval above 1.10) and a gradcheck costs
# more than 10 forward-and-backward passes at every size (interval above 10); wrong if neither
# costs that much anywhere; depends otherwise. The ``record_function`` labels do not enter the
# rule: the guide does not list them, and the figure shows what they cost. Every deciding
# comparison takes at least 12 rounds: with 6, its interval is the whole range of the rounds,
# and one stray round (a neighbour process, the host) turned "holds" into "depends".
RULE = ("holds if a profiler recording every step slows it by >10% at every width "
        "and gradcheck costs >10x a forward+backward at every size; wrong if neither "
        "at any size; depends otherwise")
decision = decide(device, [
    ("holds", {"profiler": "all above", "gradcheck": "all above"}),
    ("wrong", {"profiler": "none above", "gradcheck": "none above"}),
    ("depends", {}),
], groups={"profiler": profiler_cost, "gradcheck": gradcheck_cost,
           "record_function without profiler": label_cost},
    facts={"profiler events per step (width 64)": round(events_per_step),
           "record_function labels shown in the table": labels_found,
           "gradcheck catches the wrong backward": caught is not None},
    key=profiler_cost[0], about="host")
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": skipped}

# %%
# When not to use it
# ------------------
# Profile a few steps, not a run: ``torch.profiler.profile(schedule=torch.profiler.schedule(
# wait=1, warmup=1, active=3, repeat=1), on_trace_ready=...)`` with ``prof.step()`` at the end
# of each step records three steps, then stops recording. Leave ``record_function`` labels in
# place if you profile often, knowing that each costs a fixed amount even with no profiler
# running: the figure shows it as a share of the smallest step measured, where a fixed cost
# weighs most.
# Run ``gradcheck``/``gradgradcheck`` in tests, on small float64 inputs, for every custom
# ``autograd.Function`` you write; never inside a training step. Anomaly detection, the
# guide's first item, has its own tip.

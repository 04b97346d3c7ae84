"""
Mixed precision: autocast the forward pass, not the backward
============================================================

The article's advice and example (claim S1-5):

    "Use mixed precision for forward pass (but not for backward pass)"

with ``torch.cuda.amp.autocast()`` around the forward pass and loss, ``GradScaler()`` for the
backward, and the comment "Backward pass without mixed precision". Three things to measure.
The API: since PyTorch 2.4 ``torch.cuda.amp.autocast(...)`` and ``torch.cuda.amp.GradScaler(...)``
emit a ``FutureWarning`` pointing to ``torch.amp.autocast("cuda", ...)`` and
``torch.amp.GradScaler("cuda", ...)``. The backward: the PyTorch docs say autocast "should wrap
only the forward pass(es) of your network, including the loss computation(s)" and that
"backward ops run in the same type that autocast used for corresponding forward ops", so a
backward called outside autocast is *not* full precision: it follows the forward's dtypes.
The speed: whether an autocast training step beats float32, and at which sizes. This tip times
bfloat16 autocast on the CPU and the article's float16 autocast with ``GradScaler`` on CUDA.
"""
# sphinx_gallery_tips_claims = ["S1-5"]
# sphinx_gallery_tips_tags = ["mixed-precision", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.3"
# sphinx_gallery_tips_takeaway = "Autocast forward+loss via torch.amp (torch.cuda.amp is deprecated); backward follows its dtypes. Pays only with fast low-precision math and big layers."
# sphinx_gallery_tips_keywords = ["autocast", "GradScaler", "torch.amp", "torch.cuda.amp", "AMP", "bfloat16", "float16", "FutureWarning"]
# sphinx_gallery_tips_errors = ["FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cuda', args...)` instead.", "FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cuda', args...)` instead."]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/amp.html", "https://pytorch.org/docs/stable/notes/amp_examples.html"]
# sphinx_gallery_tips_rules = ["PTT005"]

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
# float16 with ``GradScaler`` on CUDA, as in the article; bfloat16 on the CPU, the type CPU
# autocast supports best (no scaler needed: bfloat16 has float32's exponent range). Whether
# the hardware computes that type natively decides whether it can pay at all, so the tip
# records it: Tensor Cores on the GPU, the bf16 instruction-set flags on the CPU.
import warnings

import torch
from torch.utils.benchmark import Timer

torch.manual_seed(0)
# One thread: on a busy shared 2-core machine a two-thread matmul can stall a whole
# scheduler slice waiting for its second thread, which would swamp the ratio.
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
amp_name = str(amp_dtype).replace("torch.", "")


def cpu_has_bf16():
    """Whether the CPU lists bf16 instructions (AVX512-BF16, AMX, Arm BF16)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            line = next((ln for ln in fh if ln.startswith(("flags", "Features"))), "")
    except OSError:
        return None
    flags = set(line.split(":", 1)[-1].split())
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"}) if flags else None


if device.type == "cuda":
    hardware_name = "GPU has Tensor Cores"
    hardware = torch.cuda.get_device_capability(device) >= (7, 0)
else:
    hardware_name = "CPU has bf16 instructions"
    hardware = cpu_has_bf16()
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}, autocast dtype: {amp_name}")
print(f"{hardware_name}: {hardware}")

# %%
# The article's API: ``torch.cuda.amp``
# -------------------------------------
# Constructing the two objects is enough to see the warnings. On a machine without CUDA they
# also say so and disable themselves, which is why the rest of the tip uses ``torch.amp``.
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    old_autocast = torch.cuda.amp.autocast()
    old_scaler = torch.cuda.amp.GradScaler()
for w in caught:
    print(f"{w.category.__name__}: {str(w.message).splitlines()[0][:70]}")
deprecated = any(issubclass(w.category, FutureWarning)
                 and "deprecated" in str(w.message) for w in caught)
print("torch.cuda.amp reported deprecated:", deprecated)

# %%
# The recommended pattern, and the dtype the backward runs in
# -----------------------------------------------------------
# ``torch.amp.autocast(device.type)`` wraps forward and loss; ``backward()`` runs after the
# context has exited, as the article and the docs say. A hook on the first layer's output
# records the dtype of the gradient the backward computes there.
loss_fn = torch.nn.CrossEntropyLoss()


def make_model(width):
    return torch.nn.Sequential(torch.nn.Linear(width, width, device=device),
                               torch.nn.ReLU(),
                               torch.nn.Linear(width, width, device=device),
                               torch.nn.ReLU(),
                               torch.nn.Linear(width, 10, device=device))


model = make_model(64)
x = torch.randn(32, 64, device=device)            # [batch, width]
y = torch.randint(0, 10, (32,), device=device)    # [batch]
seen = {}
with torch.amp.autocast(device.type, dtype=amp_dtype):
    h = model[0](x)                               # [batch, width], autocast dtype
    h.register_hook(lambda g: seen.__setitem__("grad", g.dtype))
    out = model[1:](h)                            # [batch, 10]
    loss = loss_fn(out, y)                        # autocast keeps this in float32
loss.backward()                                   # outside autocast
backward_dtype = str(seen["grad"]).replace("torch.", "")
print(f"forward output: {out.dtype}, loss: {loss.dtype}, "
      f"parameter grads: {model[0].weight.grad.dtype}")
print("backward (outside autocast) at the first layer's output:", backward_dtype)
grads_outside = [p.grad.clone() for p in model.parameters()]

# The same step with backward *inside* autocast: autocast only re-casts forward ops,
# so the gradients come out identical; the docs still advise against it.
model.zero_grad(set_to_none=True)
with torch.amp.autocast(device.type, dtype=amp_dtype):
    loss_fn(model(x), y).backward()
same = all(torch.equal(a, p.grad) for a, p in zip(grads_outside, model.parameters()))
print("grads identical with backward inside vs outside autocast:", same)

# %%
# Check: autocast gives the float32 gradients, to low-precision tolerance
# -----------------------------------------------------------------------
model.zero_grad(set_to_none=True)
loss_fn(model(x), y).backward()
for a, p in zip(grads_outside, model.parameters()):
    torch.testing.assert_close(a, p.grad, rtol=0.1, atol=2e-2)
print("autocast gradients match float32 gradients within rtol=0.1, atol=2e-2")

# %%
# The anti-pattern and the recommended pattern, timed
# ---------------------------------------------------
# A full training step (SGD): float32, against autocast around forward and loss with the
# backward outside. The float16 step on CUDA scales the loss with
# ``torch.amp.GradScaler("cuda")``, as the article does. The gain has to outweigh autocast's
# casts and the scaler's extra kernels and its one sync per step: after that sync the GPU
# idles while the host queues the next step, so a step costs at least the host's time to queue
# it, whatever its width. The gain can only show where the GPU's float16 work outlasts that
# floor by far: a batch that keeps every streaming multiprocessor (SM) busy, here 32 rows per
# SM, and widths sized from two measurements of this run: the autocast step's time at width
# 64, where the GPU has almost nothing to do (the floor), and this GPU's float16 matmul rate
# (``calibrate``). The widths make the step's float16 matmuls take a quarter of, once, 4 and 16
# times the floor at that rate (at most 128 per SM wide); float32 takes longer. A plain matmul
# in the low type against float32, sized to take 50 kernel launch times in float16, shows
# whether the hardware computes that type faster at all.


def make_steps(width, batch):
    model = make_model(width)
    x = torch.randn(batch, width, device=device)        # [batch, width]
    y = torch.randint(0, 10, (batch,), device=device)   # [batch]
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda") if device.type == "cuda" else None

    def step_fp32():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    def step_autocast():
        opt.zero_grad(set_to_none=True)
        with torch.amp.autocast(device.type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

    return step_fp32, step_autocast


if device.type == "cuda":
    calib = calibrate(device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    batch = 32 * sms
    probe = Timer("step()", globals={"step": make_steps(64, batch)[1]})
    floor_s = probe.blocked_autorange(min_run_time=0.2).median
    per_width2 = 12 * batch / calib["matmul_float16"]  # two w x w layers, fwd and bwd

    def width_for(seconds):  # a multiple of 64 whose float16 matmuls take that long
        return min(128 * sms, max(64, 64 * round((seconds / per_width2) ** 0.5 / 64)))

    widths = sorted({width_for(k * floor_s) for k in (0.25, 1, 4, 16)})
    print(f"autocast step at width 64, batch {batch}: {floor_s * 1e3:.3g} ms; "
          f"widths: {widths}")
else:
    widths, batch = [32, 64, 128, 256], 64
speedups = []
for width in widths:
    step_fp32, step_autocast = make_steps(width, batch)
    for fn in (step_fp32, step_autocast):
        fn()  # warm-up: first-call allocations and kernel selection
    speedups.append(compare_times(
        f"autocast speed-up at width {width}",
        {"float32": step_fp32, f"autocast {amp_name}": step_autocast},
        threshold=1.05, device=device, x=width, budget_s=1.5,
        work={"flops": 6 * batch * (2 * width + 10) * width, "limit": "matmul_float16"}
        if device.type == "cuda" else None))

m, k = 64, 256
if device.type == "cuda":  # 2 m k^2 FLOPs in 50 launch times at the float16 rate
    m = k = 64 * max(1, round((25 * calib["launch_s"] * calib["matmul_float16"])
                              ** (1 / 3) / 64))
a32 = torch.randn(m, k, device=device)  # [m, k]
b32 = torch.randn(k, k, device=device)  # [k, k]
a16, b16 = a32.to(amp_dtype), b32.to(amp_dtype)
matmul = compare_times(f"{amp_name} matmul speed-up, [{m}, {k}] @ [{k}, {k}]",
                       {"float32": lambda: a32 @ b32, amp_name: lambda: a16 @ b16},
                       threshold=1.05, device=device, x=k, budget_s=1.5,
                       work={"flops": 2 * m * k * k, "limit": "matmul_float16"}
                       if device.type == "cuda" else None)

skipped = []
if device.type == "cpu":
    skipped.append("float16 autocast + GradScaler timing: needs CUDA, none here")
else:
    skipped.append("bfloat16 autocast on the CPU: this build measures the GPU")
for s in skipped:
    print("Skipped:", s)

# %%
# Where it pays
# -------------
# The speed-up of the autocast step over the float32 step at each width, with its interval:
# below 1.0 autocast is slower.
fig = plot_ratios({f"autocast {amp_name} vs float32": speedups,
                   f"{amp_name} matmul alone": [matmul]},
                  xlabel="layer width (features)",
                  title=f"3-layer MLP training step, batch {batch}",
                  ylabel="float32 time / autocast time")

# %%
# Verdict
# -------
# Each measured part of the claim has a say. The speed: a width *gains* when the interval of
# its speed-up lies above 1.05. The backward: the article's pattern (backward outside
# autocast) is sound when that backward still runs in the autocast dtype, as the docs
# describe; in float32 it would forfeit the backward's share of the gain. The API: the
# article's ``torch.cuda.amp`` calls are deprecated. Where no step gains, the plain matmul
# and the hardware flags tell "not at these sizes" from "not on this hardware". The speed is
# a claim about the GPU's arithmetic: on CUDA a width at which the GPU idled half the time or
# more (the host and the scaler's sync set the pace) is shown, labelled, and decides nothing
# (``about="device"``).
RULE = (f"outdated if the autocast step gains >5% at some width, the backward outside "
        f"autocast runs in {amp_name} and torch.cuda.amp warns as deprecated; holds "
        f"if it gains at every width and the backward runs in {amp_name}; depends if "
        f"it gains at some widths; depends (on size) if it gains at none but a plain "
        f"{amp_name} matmul beats float32 by >5%; depends (on hardware) if neither "
        f"gains and the device lacks native {amp_name} arithmetic; wrong otherwise. On "
        f"CUDA only timings that kept the GPU busy at least half the time decide")
decision = decide(device, [
    ("outdated", {"speed-up": "any above", "backward dtype": amp_name,
                  "torch.cuda.amp deprecated": True}),
    ("holds", {"speed-up": "all above", "backward dtype": amp_name}),
    ("depends", {"speed-up": "any above"}),
    ("depends", {"matmul": "any above"}),
    ("depends", {hardware_name: False}),
    ("wrong", {}),
], groups={"speed-up": speedups, "matmul": [matmul]},
    facts={"torch.cuda.amp deprecated": deprecated, "backward dtype": backward_dtype,
           hardware_name: hardware},
    key=speedups[-1], about="device")
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": skipped}

# %%
# When not to use it
# ------------------
# Write ``torch.amp.autocast(device.type, ...)`` and ``torch.amp.GradScaler(device.type)``,
# not the deprecated ``torch.cuda.amp`` names. Autocast pays where low-precision arithmetic is
# native and the layers are large enough to hide its casts: on CPUs without bf16 units it is
# slower than float32, and small layers gain nothing even on a GPU (see the figure for this
# build's device). float16 needs ``GradScaler``; bfloat16 does not. Keep numerically delicate
# parts (large reductions, custom losses with exp/log) in float32 where autocast does not
# already do so.

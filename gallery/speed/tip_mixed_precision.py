"""
Mixed precision: autocast the forward pass, not the backward
============================================================

The article's advice and example (claim S1-5):

    "Use mixed precision for forward pass (but not for backward pass)"

with ``torch.cuda.amp.autocast()`` around the forward pass and ``GradScaler()`` for the loss.
Two things to check. First, the API: since PyTorch 2.4 ``torch.cuda.amp.autocast(...)`` and
``torch.cuda.amp.GradScaler(...)`` emit a ``FutureWarning`` pointing to
``torch.amp.autocast("cuda", ...)`` and ``torch.amp.GradScaler("cuda", ...)``. Second, what "not
for backward" means: the PyTorch docs say autocast "should wrap only the forward pass(es) of your
network, including the loss computation(s)" and that "backward ops run in the same type that
autocast used for corresponding forward ops". So the backward pass is *not* full precision; it
mirrors the forward's dtypes without needing autocast. This tip shows both, then times an
autocast training step against float32 (bfloat16 on CPU, float16 with ``GradScaler`` on CUDA).
"""
# sphinx_gallery_tips_claims = ["S1-5"]
# sphinx_gallery_tips_tags = ["mixed-precision", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.3"
# sphinx_gallery_tips_takeaway = "Wrap forward and loss in torch.amp.autocast, call backward outside it; torch.cuda.amp.* is deprecated since 2.4."
# sphinx_gallery_tips_keywords = ["autocast", "GradScaler", "torch.amp", "torch.cuda.amp", "AMP", "bfloat16", "float16", "FutureWarning"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/amp.html", "https://pytorch.org/docs/stable/notes/amp_examples.html"]

# %%
# Setup
# -----
import statistics
import warnings

import torch
import torch.utils.benchmark as benchmark

torch.manual_seed(0)
# One thread: on a busy shared 2-core machine a two-thread matmul can stall a whole scheduler
# slice waiting for its second thread, which would swamp the ratio measured here.
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}, "
      f"autocast dtype: {amp_dtype}")
if device.type == "cpu":
    print("CPU capability:", torch.backends.cpu.get_cpu_capability())

# %%
# The article's API: ``torch.cuda.amp``
# -------------------------------------
# Constructing the objects is enough to see the warnings; on a CPU build they also say CUDA is
# unavailable and disable themselves.
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    old_autocast = torch.cuda.amp.autocast()
    old_scaler = torch.cuda.amp.GradScaler()
for w in caught:
    print(f"{w.category.__name__}: {str(w.message).splitlines()[0]}")
deprecated = any(issubclass(w.category, FutureWarning) and "deprecated" in str(w.message) for w in caught)
print("torch.cuda.amp reported deprecated:", deprecated)

# %%
# The current API and where autocast ends
# ---------------------------------------
# ``torch.amp.autocast(device_type)`` wraps forward and loss; ``backward()`` runs after the
# context has exited. A gradient hook on the first layer's output shows the dtype backward
# used there; parameter gradients come back in the parameters' float32.
width, batch = 256, 128
model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())],
                            torch.nn.Linear(width, 10)).to(device)
x = torch.randn(batch, width, device=device)           # [batch, width]
y = torch.randint(0, 10, (batch,), device=device)      # [batch]
loss_fn = torch.nn.CrossEntropyLoss()
seen = {}

with torch.amp.autocast(device.type, dtype=amp_dtype):
    h = model[0](x)                                    # [batch, width], autocast dtype
    h.register_hook(lambda g: seen.__setitem__("grad of first layer output", g.dtype))
    out = model[1:](h)                                 # [batch, 10]
    loss = loss_fn(out, y)                             # autocast runs cross-entropy in float32
loss.backward()                                        # outside autocast, as the docs recommend
print("forward output dtype:", out.dtype, "| loss dtype:", loss.dtype)
print("backward dtype at the first layer output:", seen["grad of first layer output"])
print("parameter grad dtype:", model[0].weight.grad.dtype)
grads_outside = [p.grad.clone() for p in model.parameters()]

# The same step with backward *inside* autocast: here the gradients come out identical, because
# autocast only re-casts forward ops; the docs still advise against it.
model.zero_grad(set_to_none=True)
with torch.amp.autocast(device.type, dtype=amp_dtype):
    loss_in = loss_fn(model(x), y)
    loss_in.backward()
same = all(torch.equal(a, p.grad) for a, p in zip(grads_outside, model.parameters()))
print("grads identical with backward inside vs outside autocast:", same)

# %%
# Check: the autocast step computes the float32 step's gradients, to low-precision tolerance
# ------------------------------------------------------------------------------------------
model.zero_grad(set_to_none=True)
loss_fn(model(x), y).backward()
grads_fp32 = [p.grad.clone() for p in model.parameters()]
for a, b in zip(grads_outside, grads_fp32):
    torch.testing.assert_close(a, b, rtol=0.1, atol=2e-2)
print("autocast gradients match float32 gradients within rtol=0.1, atol=2e-2")

# %%
# The anti-pattern and the recommended pattern, timed
# ---------------------------------------------------
# A full training step: float32, versus autocast forward + loss and backward outside it. On CUDA
# the float16 step uses ``torch.amp.GradScaler("cuda")``; bfloat16 needs no scaling. Two model
# sizes: the low-precision matmul gain has to outweigh autocast's per-op casting cost.


def make_steps(width, batch):
    model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())],
                                torch.nn.Linear(width, 10)).to(device)
    x = torch.randn(batch, width, device=device)       # [batch, width]
    y = torch.randint(0, 10, (batch,), device=device)  # [batch]
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
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    return step_fp32, step_autocast


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


sizes = [(128, 64), (512, 256)] if device.type == "cpu" else [(512, 256), (4096, 4096)]
ac_name = f"autocast {str(amp_dtype).replace('torch.', '')}"
measurements, ratios, per_step = [], {}, {}
for width, batch in sizes:
    step_fp32, step_autocast = make_steps(width, batch)
    for fn in (step_fp32, step_autocast):
        fn()  # warm-up: first-call allocations and kernel selection
    runs = time_interleaved({"float32": step_fp32, ac_name: step_autocast},
                            label="MLP training step", description=f"width {width}, batch {batch}")
    ratios[width] = [f.median / a.median for f, a in zip(runs["float32"], runs[ac_name])]
    measurements += runs["float32"] + runs[ac_name]
    for name, ms in runs.items():
        per_step[name, width, batch] = [m.median * 1e3 for m in ms]  # ms per step, one per round
compare = benchmark.Compare(measurements)
compare.trim_significant_figures()
compare.print()
print("speed-up of autocast over float32 (median, range over rounds):")
for width, r in ratios.items():
    print(f"  width {width:5d}: {statistics.median(r):.3f}x  [{min(r):.3f} .. {max(r):.3f}]")

skipped = []
if device.type == "cpu":
    msg = "float16 autocast + GradScaler('cuda') timing: needs CUDA (no CUDA device in this build)"
    print("Skipped:", msg)
    skipped.append(msg)

# %%
# Verdict
# -------
# The usage pattern (autocast around forward and loss, backward outside) is what the docs
# recommend; whether it is worth it depends on the hardware having fast low-precision matmuls.
RULE = ("gain = median speed-up of the autocast step over float32 > 1.05. depends if the gain "
        "shows at some sizes or none; if at every size: outdated when the article's torch.cuda.amp "
        "API warns as deprecated, holds otherwise")
gain = [w for w, r in ratios.items() if statistics.median(r) > 1.05]
if len(gain) < len(ratios):
    verdict = "depends"
    reason = f"autocast {amp_dtype} pays at widths {gain or 'none'} of {list(ratios)} on {device.type}"
elif deprecated:
    verdict = "outdated"
    reason = ("autocast pays at every width and backward runs in the forward's dtypes, but "
              "torch.cuda.amp.autocast/GradScaler are deprecated: use torch.amp")
else:
    verdict = "holds"
    reason = "autocast pays at every width and the article's API is current in this torch"
print(f"Verdict: {verdict}. {reason}.")
print(f"Rule: {RULE}")

key_w = sizes[-1][0]
RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": f"{ac_name} speed-up at width {key_w}", "value": statistics.median(ratios[key_w]),
            "low": min(ratios[key_w]), "high": max(ratios[key_w]), "unit": "x"},
    "measurements": [
        {"variant": f"{name}, width {w}, batch {b}", "metric": "time per training step", "unit": "ms",
         "value": statistics.median(v), "spread": max(v) - min(v)}
        for (name, w, b), v in per_step.items()
    ],
    "skipped": skipped,
}

# %%
# When not to use it
# ------------------
# Skip autocast on CPUs without native bfloat16 (no AVX512-BF16 or AMX), where it can be slower
# than float32, and for numerically delicate parts (large reductions, losses with exp/log) that
# autocast does not already keep in float32. float16 needs ``GradScaler``; bfloat16 does not.

"""
``zero_grad(set_to_none=True)`` is now the default
==================================================

The article's sixth tip (claim S1-6):

    "Set gradients to `None` before the optimizer updates the weights."

and, in its example loop, ``optimizer.zero_grad(set_to_none = True)``.

``set_to_none=True`` drops each ``.grad`` tensor instead of filling it with zeros: no memset,
the next ``backward`` writes a fresh gradient instead of adding into the old one, and between
steps the gradients take no memory. PyTorch 2.0 made it the default of both
``torch.optim.Optimizer.zero_grad`` and ``torch.nn.Module.zero_grad`` (the argument itself
arrived in 1.7). This tip observes what a plain ``zero_grad()`` does on the installed torch,
shows the one behavioural difference that matters, and times a training step both ways across
model sizes.
"""
# sphinx_gallery_tips_claims = ["S1-6"]
# sphinx_gallery_tips_tags = ["optimizer", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.7"
# sphinx_gallery_tips_takeaway = "Since torch 2.0 plain zero_grad() already sets grads to None; only set_to_none=False still zero-fills them."
# sphinx_gallery_tips_keywords = ["set_to_none", "zero_grad", "optimizer.zero_grad", "gradients None", "grad memory"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html"]
# sphinx_gallery_tips_rules = ["PTT006"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, anti-pattern time / recommended time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import (calibrate, compare_times, decide, outcome, plot_ratios,
                            report)


# %%
# Setup
# -----
# A stack of linear layers on CUDA when there is one, else on the CPU. One CPU thread: the
# difference is a memset and an addition per step, not parallel work, and a single thread keeps
# small ops from stalling on a busy machine.
import torch
import torch.utils.benchmark as benchmark

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")
BATCH = 32


def make_model(width, depth=4):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width, device=device), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


# %%
# What a plain ``zero_grad()`` does here
# --------------------------------------
# Observed, not read from the documentation: after a backward pass, call ``zero_grad()``
# without arguments on the optimizer and on the module, and look at the gradients.
model = make_model(16)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(BATCH, 16, device=device)).sum().backward()
optimizer.zero_grad()
optimizer_leaves_none = all(p.grad is None for p in model.parameters())
model(torch.randn(BATCH, 16, device=device)).sum().backward()
model.zero_grad()
module_leaves_none = all(p.grad is None for p in model.parameters())
default_none = optimizer_leaves_none and module_leaves_none
print("optimizer.zero_grad() leaves grads None:", optimizer_leaves_none)
print("model.zero_grad() leaves grads None:    ", module_leaves_none)

# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The same training step, differing only in how the gradients are reset.
def train_step_zeros(model, optimizer, x):
    optimizer.zero_grad(set_to_none=False)
    model(x).square().mean().backward()
    optimizer.step()


def train_step_none(model, optimizer, x):
    optimizer.zero_grad(set_to_none=True)  # the default since torch 2.0
    model(x).square().mean().backward()
    optimizer.step()


train_step = {False: train_step_zeros, True: train_step_none}  # by set_to_none


# %%
# Check: same training, one behavioural difference
# ------------------------------------------------
# For parameters that receive a gradient every step, both give identical weights.
x = torch.randn(BATCH, 256, device=device)  # [batch, features]
models = {flag: make_model(256) for flag in (False, True)}
for flag, model in models.items():
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        train_step[flag](model, optimizer, x)
for a, b in zip(models[False].parameters(), models[True].parameters()):
    torch.testing.assert_close(a, b, rtol=0, atol=0)
print("3 SGD steps: identical weights with set_to_none=False and True")

# Between steps the grads are zero tensors (memory kept) or None (memory released).
grad_bytes = {}
for flag, model in models.items():
    model.zero_grad(set_to_none=flag)
    grads = [p.grad for p in model.parameters()]
    grad_bytes[flag] = sum(g.numel() * g.element_size() for g in grads if g is not None)
    state = "None" if all(g is None for g in grads) else "zero tensors"
    print(f"after zero_grad(set_to_none={flag}): grads are {state}, "
          f"{grad_bytes[flag] / 2**20:.2f} MiB held")

# The difference: a parameter that got no gradient this step. A zero gradient is still
# a gradient, so momentum (and weight decay) keep moving the weight; a None gradient
# makes the optimizer skip that parameter altogether.
moved = {}
for flag in (False, True):
    torch.manual_seed(0)
    used, unused = torch.nn.Linear(4, 4).to(device), torch.nn.Linear(4, 4).to(device)
    optimizer = torch.optim.SGD([*used.parameters(), *unused.parameters()], lr=0.1,
                                momentum=0.9)
    inp = torch.randn(2, 4, device=device)  # [batch, features]
    (used(inp) + unused(inp)).sum().backward()
    optimizer.step()  # both layers get momentum
    before = unused.weight.detach().clone()
    optimizer.zero_grad(set_to_none=flag)
    used(inp).sum().backward()  # "unused" takes no part in this step
    optimizer.step()
    moved[flag] = not torch.equal(before, unused.weight)
    grad = "None" if unused.weight.grad is None else "zeros"
    print(f"set_to_none={flag}: unused layer's grad is {grad}, "
          f"weight moved: {moved[flag]}")
assert moved[False] and not moved[True]

# %%
# Measurement
# -----------
# One full training step (zero_grad, forward, backward, SGD step) for models from tiny (the
# step is mostly Python overhead) to larger (each step moves megabytes of weights and
# gradients through memory), the two settings alternating round by round. Speed-up =
# set_to_none=False time / set_to_none=True time; the threshold is 1.0: above means None is
# measurably faster, below means it is measurably slower.
#
# On a GPU, what ``set_to_none`` saves is GPU work (a fill of every gradient, and a read of
# it in the next backward), which only shows once the step's GPU work outlasts the host's
# time to queue the step. So the CUDA widths are sized from two measurements of this run: the
# time of a step at width 64, where the GPU has almost nothing to do (the host's time per
# step), and this GPU's float32 matmul and device copy rates (``calibrate``). From these, a
# step's GPU work at width ``w`` is about ``w**2`` times (its matmuls' FLOPs at the matmul
# rate, plus about eight passes over the weights' bytes at the copy rate); the widths make it
# a quarter of, once, 4 and 16 times the host's time per step (at most 128 per streaming
# multiprocessor wide).
#
# On a CPU, a fresh gradient costs what the C library's allocator makes it cost, and that
# depends on the process's history: where the allocator kept the memory of the gradients
# ``None`` dropped, the next backward reuses it; where it handed that memory back to the
# operating system, the next backward takes a page fault for every 4 KiB of every gradient it
# writes, and ``None`` can be the slower setting. Which happens changes from run to run, and
# with what ran earlier in the process. So every timed step also counts the process's minor
# page faults (Unix), and each width reports them per step for both settings.
def page_faults():
    """This process's minor page faults so far (Unix), or None (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


if device.type == "cuda":
    calib = calibrate(device)
    probe = make_model(64)
    probe_args = (probe, torch.optim.SGD(probe.parameters(), lr=1e-3),
                  torch.randn(BATCH, 64, device=device))
    host_s = benchmark.Timer("step(*args)", globals={
        "step": train_step_none, "args": probe_args}).blocked_autorange(
        min_run_time=0.2).median
    per_width2 = (6 * 4 * BATCH / calib["matmul_float32"]  # fwd and bwd matmuls
                  + 8 * 4 * 4 / calib["copy_device"])  # ~8 passes over the weights
    most = 128 * torch.cuda.get_device_properties(device).multi_processor_count

    def width_for(seconds):  # a multiple of 64 whose step takes that long on the GPU
        return min(most, max(64, 64 * round((seconds / per_width2) ** 0.5 / 64)))

    widths = sorted({width_for(k * host_s) for k in (0.25, 1, 4, 16)})
    print(f"host time per step at width 64: {host_s * 1e3:.3g} ms; widths: {widths}")
else:
    widths = [32, 128, 512, 1024]
speedups, faults = [], []
for width in widths:
    x = torch.randn(BATCH, width, device=device)  # [batch, features]
    steps, took = {}, {}
    for flag in (False, True):
        model = make_model(width)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        took[flag] = [0, 0]  # page faults, steps

        def timed_step(m=model, o=optimizer, step=train_step[flag], t=took[flag]):
            before = page_faults()
            step(m, o, x)
            if before is not None:
                t[0] += page_faults() - before
                t[1] += 1

        steps[f"set_to_none={flag}"] = timed_step
    speedups.append(compare_times(f"speed-up at width {width}", steps, threshold=1.0,
                                  device=device, x=width, budget_s=1.0))
    faults.append({flag: t[0] / t[1] if t[1] else None for flag, t in took.items()})
    if None not in faults[-1].values():
        print(f"width {width}: minor page faults per step, set_to_none=False "
              f"{faults[-1][False]:.0f}, True {faults[-1][True]:.0f}")
    del steps, model, optimizer

measurements, skipped = [], []
for width, counts in zip(widths, faults):
    for flag, count in counts.items():
        if count is not None:
            measurements.append({"variant": f"set_to_none={flag}, width {width}",
                                 "metric": "minor page faults per timed step",
                                 "value": float(count), "unit": "",
                                 "device": device.type})
for flag, held in grad_bytes.items():
    measurements.append({"variant": f"set_to_none={flag}, width 256",
                         "metric": "grad bytes held between steps",
                         "value": float(held), "unit": "B", "device": device.type})
if device.type == "cuda":
    model = make_model(256)
    model(torch.randn(BATCH, 256, device=device)).square().mean().backward()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    model.zero_grad(set_to_none=True)
    freed = before - torch.cuda.memory_allocated()
    print(f"CUDA memory released by zero_grad(set_to_none=True): "
          f"{freed / 2**20:.2f} MiB")
    measurements.append({"variant": "set_to_none=True, width 256",
                         "metric": "CUDA memory released by zero_grad",
                         "value": float(freed), "unit": "B", "device": "cuda"})
else:
    print("Skipped: the allocator's view of the released grads needs CUDA")
    skipped.append("CUDA memory_allocated after zero_grad: no CUDA device in this "
                   "build")

# %%
# Where it pays
# -------------
# The speed-up of ``set_to_none=True`` over zero-filling for each model width, with its
# interval.
fig = plot_ratios({"set_to_none=True vs False": speedups},
                  xlabel=f"layer width (4 Linear layers, batch {BATCH})",
                  ylabel="zero-filling step time / None step time",
                  title="training step: zero_grad(set_to_none=...)")

# %%
# Verdict
# -------
# The advice is outdated where a plain ``zero_grad()`` already leaves the gradients ``None``
# (observed above) and ``None`` is not markedly slower than zero-filling at any width: writing
# ``set_to_none=True`` out changes nothing. "Markedly" is a 10% margin, read from the same
# rounds (interval of the speed-up below 0.9): on a CPU the two settings differ by a few
# percent at most (fresh gradient tensors cost an allocation), and a rule at 1.0 or 0.95
# would be decided by the noise of the machine. A width at which ``None``'s steps took more
# page faults than zero-filling's does not count against the default: there the allocator
# had handed the dropped gradients' memory back to the operating system, and what the
# rounds measured is the faults, which come and go with the process's history (its speed-up
# is shown, and its faults are listed). Should every width be such a one, all
# of them count. The key figure is the speed-up at the widest width that counts. On an older
# torch, where the default zero-fills, it holds if ``set_to_none=True`` is measurably faster
# at some width. On a GPU the claim is about GPU work (a fill and a read of every gradient
# that ``None`` saves): a width at which the GPU idled half the time or more is shown,
# labelled, and decides nothing (``about="device"``); each "markedly slower" point is the
# same rounds as its speed-up, GPU times and all, read against 0.9.
slower = [{**{k: v for k, v in c.items() if k != "margin"},
           "name": f"None >10% slower at width {c['x']}", "threshold": 0.9,
           "outcome": outcome(c["low"], c["high"], 0.9)} for c in speedups]
refaulted = [f[True] is not None and f[True] > f[False] + 1 for f in faults]
own = [c for c, r in zip(slower, refaulted) if not r] or slower
RULE = ("outdated if a plain zero_grad() already leaves the grads None and "
        "set_to_none=True is >10% slower at no width (no interval below 0.9) where "
        "its steps took no more page faults than zero-filling's; otherwise holds if "
        "it is faster at some width (interval above 1.0), wrong if slower at every "
        "width, depends otherwise. On CUDA only widths that kept the GPU busy at least "
        "half the time decide")
decision = decide(device,
                  [("outdated", {"plain zero_grad() leaves grads None": True,
                                 "None >10% slower": "none below"}),
                   ("holds", {"plain zero_grad() leaves grads None": False,
                              "speed-up": "any above"}),
                   ("wrong", {"speed-up": "all below"}),
                   ("depends", {})],
                  groups={"speed-up": speedups, "None >10% slower": own},
                  facts={"plain zero_grad() leaves grads None": default_none},
                  key=next(c for c in speedups if c["x"] == own[-1]["x"]),
                  about="device")
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": measurements, "skipped": skipped}

# %%
# When not to use it
# ------------------
# Call plain ``optimizer.zero_grad()`` on torch 2.0 and later. Pass ``set_to_none=False`` only
# when code reads ``p.grad`` after zeroing (e.g. adds into it by hand, or expects a tensor for
# every parameter), or when you want momentum or weight decay to keep acting on parameters
# that skip a step; with ``None`` the optimizer leaves them untouched, as shown above. On a CPU,
# also where the page faults above show the allocator returning the dropped gradients'
# memory to the operating system every step: there zero-filling, which keeps the memory,
# can be the faster setting.

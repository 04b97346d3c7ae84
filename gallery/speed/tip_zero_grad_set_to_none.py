"""
``zero_grad(set_to_none=True)`` is now the default
==================================================

The article's sixth tip (claim S1-6):

    "Reset the gradients to None. Set gradients to `None` before the optimizer updates the
    weights." and, in its example loop, ``optimizer.zero_grad(set_to_none = True)``.

``set_to_none=True`` drops each ``.grad`` tensor instead of filling it with zeros: no memset,
the next ``backward`` writes a fresh gradient instead of adding into the old one, and between
steps the gradients take no memory. PyTorch 2.0 made it the default of both
``torch.optim.Optimizer.zero_grad`` and ``torch.nn.Module.zero_grad`` (pytorch/pytorch#92731;
the argument itself arrived in 1.7). This tip reads the default from the installed torch,
shows the one behavioural difference that matters, and times a training step both ways.
"""
# sphinx_gallery_tips_claims = ["S1-6"]
# sphinx_gallery_tips_tags = ["optimizer", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.7"
# sphinx_gallery_tips_takeaway = "Since torch 2.0 plain zero_grad() already sets grads to None; only set_to_none=False still zero-fills them."
# sphinx_gallery_tips_keywords = ["set_to_none", "zero_grad", "optimizer.zero_grad", "gradients None", "grad memory"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html"]

# %%
# Setup
# -----
# One CPU thread: the difference is a memset per step, not parallel work, and a single thread
# keeps small ops from stalling on a busy machine, so figures from different runs compare.
import inspect

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")

# The default, read from this torch rather than remembered.
defaults = {
    "torch.optim.Optimizer.zero_grad": inspect.signature(torch.optim.Optimizer.zero_grad),
    "torch.nn.Module.zero_grad": inspect.signature(torch.nn.Module.zero_grad),
}
for name, sig in defaults.items():
    print(f"{name}{sig}")
default_is_none = all(sig.parameters["set_to_none"].default is True for sig in defaults.values())


def make_model(width=256, depth=4):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).to(device)


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The same training step, differing only in how the gradients are reset.
def train_step(model, optimizer, x, set_to_none):
    optimizer.zero_grad(set_to_none=set_to_none)
    model(x).square().mean().backward()
    optimizer.step()


# %%
# Check: same training, one behavioural difference
# ------------------------------------------------
# For parameters that receive a gradient every step, both give identical weights.
x = torch.randn(32, 256, device=device)  # [batch, features]
models = {flag: make_model() for flag in (False, True)}
for flag, model in models.items():
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        train_step(model, optimizer, x, set_to_none=flag)
for a, b in zip(models[False].parameters(), models[True].parameters()):
    torch.testing.assert_close(a, b, rtol=0, atol=0)
print("3 SGD steps: identical weights with set_to_none=False and True")

# Between steps the grads are zeros (memory kept) or None (memory freed).
grad_bytes = {}
for flag, model in models.items():
    model.zero_grad(set_to_none=flag)
    grads = [p.grad for p in model.parameters()]
    grad_bytes[flag] = sum(g.numel() * g.element_size() for g in grads if g is not None)
    print(f"after zero_grad(set_to_none={flag}): grads are "
          f"{'None' if all(g is None for g in grads) else 'zero tensors'}, "
          f"{grad_bytes[flag] / 2**20:.2f} MiB held")

# The difference: a parameter that got no gradient this step. A zero gradient is still a
# gradient, so momentum (and weight decay) keep moving the weight; a None gradient makes the
# optimizer skip that parameter altogether.
moved = {}
for flag in (False, True):
    torch.manual_seed(0)
    used, unused = torch.nn.Linear(4, 4).to(device), torch.nn.Linear(4, 4).to(device)
    optimizer = torch.optim.SGD([*used.parameters(), *unused.parameters()], lr=0.1, momentum=0.9)
    inp = torch.randn(2, 4, device=device)  # [batch, features]
    (used(inp) + unused(inp)).sum().backward()
    optimizer.step()  # both layers get momentum
    before = unused.weight.detach().clone()
    optimizer.zero_grad(set_to_none=flag)
    used(inp).sum().backward()  # "unused" takes no part in this step
    optimizer.step()
    moved[flag] = not torch.equal(before, unused.weight)
    print(f"set_to_none={flag}: unused layer's grad is "
          f"{'None' if unused.weight.grad is None else 'zeros'}, weight moved: {moved[flag]}")
assert moved[False] and not moved[True]

# %%
# Measurement
# -----------
# One full training step (zero_grad, forward, backward, SGD step), the two settings
# alternating round by round. Speed-up = set_to_none=False time / set_to_none=True time.
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


variants = {}
for flag in (False, True):
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    variants[f"set_to_none={flag}"] = (
        lambda m=model, o=optimizer, f=flag: train_step(m, o, x, set_to_none=f)
    )
runs = time_interleaved(variants, "training step", "4x Linear(256, 256), batch 32")
compare = benchmark.Compare(runs["set_to_none=False"] + runs["set_to_none=True"])
compare.trim_significant_figures()
compare.print()

ratios = [a.median / b.median for a, b in zip(runs["set_to_none=False"], runs["set_to_none=True"])]
per_step = {name: [m.median * 1e6 for m in ms] for name, ms in runs.items()}  # microseconds
print(f"speed-up of set_to_none=True: {statistics.median(ratios):.3f}x "
      f"[{min(ratios):.3f} .. {max(ratios):.3f}] over {len(ratios)} rounds")

skipped = []
if torch.cuda.is_available():
    model = make_model()
    model(x).square().mean().backward()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    model.zero_grad(set_to_none=True)
    print(f"CUDA memory freed by set_to_none=True: {(before - torch.cuda.memory_allocated()) / 2**20:.2f} MiB")
else:
    print("Skipped: allocator view of the freed grads needs CUDA (no CUDA device in this build)")
    skipped.append("CUDA memory_allocated after zero_grad: no CUDA device in this build")

# %%
# Verdict
# -------
# If this torch already defaults to ``set_to_none=True``, writing it out changes nothing: the
# advice has become the default. The timing says how much the default buys over zero-filling.
RULE = ("outdated if zero_grad() already defaults to set_to_none=True on this torch; otherwise "
        "holds if set_to_none=True is faster by more than 3% (lower quartile of the per-round "
        "speed-up above 1.03), depends if not")
speedup = statistics.median(ratios)
q1, _, q3 = statistics.quantiles(ratios, n=4)
if q1 > 1.03:
    timing = f"faster by more than 3% (quartiles {q1:.3f} .. {q3:.3f})"
elif q3 < 1.03:
    timing = f"no 3% gain (quartiles {q1:.3f} .. {q3:.3f})"
else:
    timing = f"inside the noise (quartiles {q1:.3f} .. {q3:.3f})"
if default_is_none:
    verdict = "outdated"
elif q1 > 1.03:
    verdict = "holds"
else:
    verdict = "depends"
print(f"Verdict: {verdict}. Default set_to_none=True on torch {torch.__version__}: "
      f"{default_is_none}. Versus zero-filling: {speedup:.3f}x per step, {timing}; "
      f"{grad_bytes[False] / 2**20:.2f} MiB of zero grads not kept between steps.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": "step speed-up of set_to_none=True", "value": speedup,
            "low": min(ratios), "high": max(ratios), "unit": "x"},
    "measurements": [
        {"variant": name, "metric": "time per training step", "unit": "us",
         "value": statistics.median(us), "spread": max(us) - min(us)}
        for name, us in per_step.items()
    ] + [
        {"variant": f"set_to_none={flag}", "metric": "grad bytes held between steps",
         "value": float(b), "unit": "B"}
        for flag, b in grad_bytes.items()
    ],
    "skipped": skipped,
}

# %%
# When not to use it
# ------------------
# Call plain ``optimizer.zero_grad()`` on torch 2.0 and later. Pass ``set_to_none=False`` only
# when code reads ``p.grad`` after zeroing (e.g. adds into it by hand, or expects a tensor for
# every parameter), or when you want momentum/weight decay to keep acting on parameters that
# skip a step; with ``None`` the optimizer leaves them untouched, as shown above.

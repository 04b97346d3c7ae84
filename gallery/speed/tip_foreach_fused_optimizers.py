"""
Optimizer implementations: for-loop, ``foreach=True`` and ``fused=True``
========================================================================

The seed articles never mention how an optimizer runs its update. The ``torch.optim``
documentation ("Algorithms") ranks its three implementations:

    "In general, the performance ordering of the 3 implementations is fused > foreach >
    for-loop. So when applicable, we default to foreach over for-loop."

The default is chosen per device: ``Adam``'s docstring says it tries foreach "on CUDA, since
it is usually significantly more performant", so on the CPU an optimizer built without flags
runs the for-loop. ``fused=True`` on the CPU arrived in torch 2.4 (marked *beta* in the docs'
stability table); older releases refuse it there, so this tip first checks that the fused
implementation runs on this device before timing it. It then times one ``Adam.step()`` with
each implementation as the same number of weights is split into more and more tensors, since
the for-loop pays a fixed cost per tensor.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["optimizer", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "foreach Adam saves per-tensor overhead, so it can pay only with many parameter tensors; fused=True (CPU: torch 2.4+) fuses the whole update. See the figure."
# sphinx_gallery_tips_statement = "In general, the performance ordering of the 3 implementations is fused > foreach > for-loop."
# sphinx_gallery_tips_keywords = ["torch.optim.Adam", "foreach", "fused", "multi-tensor", "optimizer.step", "_foreach"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/optim.html"]
# sphinx_gallery_tips_rules = ["PTT031"]

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
# A fixed number of weights (64 Ki floats on the CPU, 4 Mi on a GPU, which needs far more
# work per kernel before launch overheads stop dominating), split into 1 to a few hundred
# tensors. One CPU thread: the question is per-tensor overhead, not parallelism.
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")
total = {"cpu": 2**16, "cuda": 2**22}[device.type]
counts = {"cpu": [1, 4, 32, 256], "cuda": [1, 8, 64, 512]}[device.type]


def make_params(n):
    """``n`` parameters holding ``total`` weights between them, with fixed gradients."""
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(total // n, generator=g).to(device).requires_grad_()
              for _ in range(n)]  # n x [total / n], leaves as an optimizer expects
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(device)
    return params


# %%
# The anti-pattern and the recommended patterns
# ---------------------------------------------
# ``foreach=False`` forces the for-loop, which is also what ``Adam(params)`` runs on the CPU.
def adam_for_loop(params):  # anti-pattern
    return torch.optim.Adam(params, lr=1e-3, foreach=False)


def adam_foreach(params):
    return torch.optim.Adam(params, lr=1e-3, foreach=True)


def adam_fused(params):  # recommended
    return torch.optim.Adam(params, lr=1e-3, fused=True)


implementations = {"for-loop": adam_for_loop, "foreach": adam_foreach,
                   "fused": adam_fused}


def make_opt(params, impl):
    return implementations[impl](params)


# Use fused only where this torch has it for this device: older releases raise here.
skipped = []
try:
    make_opt(make_params(1), "fused").step()
except (RuntimeError, ValueError, TypeError) as err:
    print(f"fused Adam does not run on {device.type} in torch {torch.__version__}:",
          str(err).splitlines()[0][:60])
    skipped.append(f"fused Adam: not supported on {device.type} in torch "
                   f"{torch.__version__}")
    del implementations["fused"]
print("implementations that run here:", ", ".join(implementations))

default = torch.optim.Adam(make_params(1))
print("Adam() defaults: foreach =", default.defaults["foreach"], "| fused =",
      default.defaults.get("fused"), "(None: chosen per device at the first step)")

# %%
# Check: every implementation computes the same update
# ----------------------------------------------------
# Five steps from identical parameters and gradients; the results agree to float32 rounding.
results = {}
for impl in implementations:
    params = make_params(4)
    opt = make_opt(params, impl)
    for _ in range(5):
        opt.step()
    results[impl] = torch.cat([p.detach().flatten() for p in params])
for value in results.values():
    torch.testing.assert_close(value, results["for-loop"], rtol=1e-5, atol=1e-6)
print("after 5 steps all implementations agree:", ", ".join(results))

# %%
# Measurement
# -----------
# One timed call is one ``opt.step()`` (gradients stay fixed; the state keeps updating,
# which costs the same every step). Two comparisons per tensor count, one per rung of the
# documented ordering: foreach against the for-loop, and fused against foreach.
foreach_gain, fused_gain = [], []
for n in counts:
    opts = {impl: make_opt(make_params(n), impl) for impl in implementations}
    for opt in opts.values():
        opt.step()  # warm-up: the first step allocates the optimizer state
    foreach_gain.append(compare_times(
        f"foreach over for-loop, {n} tensors",
        {"for-loop": opts["for-loop"].step, "foreach": opts["foreach"].step},
        threshold=1.10, device=device, x=n, budget_s=1.5))
    if "fused" in opts:
        fused_gain.append(compare_times(
            f"fused over foreach, {n} tensors",
            {"foreach": opts["foreach"].step, "fused": opts["fused"].step},
            threshold=1.10, device=device, x=n, budget_s=1.5))

# %%
# Where it pays
# -------------
# Each rung of the ordering against the number of tensors the same weights are split into.
series = {"foreach over for-loop": foreach_gain}
if fused_gain:
    series["fused over foreach"] = fused_gain
fig = plot_ratios(series, xlabel=f"parameter tensors ({total:,} weights in all)",
                  title="Adam.step()",
                  ylabel="slower variant time / faster variant time")

# %%
# Verdict
# -------
# Each rung *gains* at a tensor count when the interval of its speed-up lies above 1.10.
# With a single tensor there is no per-tensor overhead for foreach to save (the for-loop
# runs its ops once too), so that point is shown, not judged. What foreach and fused save is
# the host's work (one launch per tensor and op), so on a GPU every timing counts, host-bound
# ones too (``about="host"``).
RULE = ("holds if foreach beats the for-loop by >10% (interval above 1.10) at every "
        "count above 1 tensor (at 1 tensor there is no loop to save: shown, not "
        "judged) and fused runs here and beats foreach by >10% at every count; "
        "otherwise depends if either rung gains at any of those counts, wrong if "
        "neither does. They save the host's launches: on a GPU a host-bound timing "
        "counts")
groups = {"foreach over for-loop": [c for c in foreach_gain if c["x"] > 1],
          "foreach over for-loop, 1 tensor": [c for c in foreach_gain if c["x"] == 1]}
cases = [("depends", {"foreach over for-loop": "any above"}), ("wrong", {})]
if fused_gain:
    groups["fused over foreach"] = fused_gain
    cases = [("holds", {"foreach over for-loop": "all above",
                        "fused over foreach": "all above"}),
             ("depends", {"foreach over for-loop": "any above"}),
             ("depends", {"fused over foreach": "any above"}),
             ("wrong", {})]
decision = decide(device, cases, groups=groups, key=foreach_gain[-1], about="host")
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": skipped}

# %%
# When not to use it
# ------------------
# ``foreach`` keeps a list of intermediates for all parameters at once: the docstring warns
# it "uses ~ sizeof(params) more peak memory than the for-loop version". If memory is the
# limit, keep the for-loop. With a handful of large tensors it buys little (see the figure).
# ``fused`` on the CPU is beta and needs torch 2.4 or later; check that it is supported for
# your optimizer (Adam, AdamW, SGD, Adagrad) and device, as this tip does, before relying on
# it.

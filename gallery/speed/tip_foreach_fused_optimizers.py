"""
Optimizer implementations: for-loop, ``foreach=True`` and ``fused=True``
========================================================================

The seed articles never mention how an optimizer runs its update. The ``torch.optim``
documentation ("Algorithms") ranks its three implementations:

    "In general, the performance ordering of the 3 implementations is fused > foreach > for-loop.
    So when applicable, we default to foreach over for-loop."

The default choice is made per device: ``Adam``'s docstring says it tries foreach "on CUDA,
since it is usually significantly more performant". On CPU an optimizer built without flags
therefore runs the for-loop. ``fused=True`` on CPU arrived in torch 2.4 (marked *beta* in
the docs' stability table). This tip times one ``Adam.step()`` with each implementation for
many small parameters and for a few large ones.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["optimizer", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "Pass foreach=True or fused=True to Adam on CPU: the default there is the for-loop; the gain is largest for many small parameters."
# sphinx_gallery_tips_keywords = ["torch.optim.Adam", "foreach", "fused", "multi-tensor", "optimizer.step", "_foreach"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/optim.html"]

# %%
# Setup
# -----
# Two parameter sets of similar total size (~1M floats): 256 small tensors, or 4 large ones.
import statistics

import torch
import torch.utils.benchmark as benchmark

torch.manual_seed(0)
# One CPU thread: the question is not parallelism, and one thread keeps timings stable on a
# busy machine (multi-threaded small ops stall when other processes hold the cores).
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")

shapes = {"256 x [64, 64]": [(64, 64)] * 256, "4 x [512, 512]": [(512, 512)] * 4}


def make_params(shape_list):
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=g).to(device)) for s in shape_list]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(device)
    return params


# %%
# The anti-pattern and the recommended patterns
# ---------------------------------------------
# ``foreach=False`` forces the for-loop, which is also what ``Adam(params)`` picks on CPU.
implementations = {"for-loop": {"foreach": False}, "foreach": {"foreach": True},
                   "fused": {"fused": True}}
skipped = []


def make_opt(params, impl):
    return torch.optim.Adam(params, lr=1e-3, **implementations[impl])


probe = make_params([(4, 4)])
try:
    make_opt(probe, "fused").step()
except (RuntimeError, ValueError, TypeError) as err:
    print(f"fused Adam is not available on {device} in torch {torch.__version__}:",
          str(err).splitlines()[0])
    skipped.append(f"fused Adam: not supported on {device} in torch {torch.__version__}")
    del implementations["fused"]

default_opt = torch.optim.Adam(make_params([(4, 4)]))
default_opt.step()
print("Adam() defaults: foreach =", default_opt.defaults["foreach"],
      "| fused =", default_opt.defaults.get("fused"), "(None means: chosen per device)")

# %%
# Check: every implementation computes the same update
# ----------------------------------------------------
# Five steps from identical parameters and gradients; the results agree to float32 rounding.
results = {}
for impl in implementations:
    params = make_params(shapes["4 x [512, 512]"][:1])
    opt = make_opt(params, impl)
    for _ in range(5):
        opt.step()
    results[impl] = params[0].detach().clone()
for value in results.values():
    torch.testing.assert_close(value, results["for-loop"], rtol=1e-5, atol=1e-6)
print("after 5 steps all implementations agree:", ", ".join(results))

# %%
# Measurement
# -----------
# One timed statement = one ``opt.step()`` (gradients stay fixed; the state keeps updating,
# which costs the same every step). Implementations alternate round by round. Speed-up =
# for-loop time / other time.


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


all_m, ratios, per_call = [], {}, {}
for desc, shape_list in shapes.items():
    opts = {impl: make_opt(make_params(shape_list), impl) for impl in implementations}
    runs = time_interleaved({impl: opt.step for impl, opt in opts.items()},
                            label="Adam.step()", description=desc)
    for impl, ms in runs.items():
        all_m += ms
        per_call[impl, desc] = [m.median * 1e6 for m in ms]
        if impl != "for-loop":
            ratios[impl, desc] = [a.median / b.median for a, b in zip(runs["for-loop"], ms)]

benchmark.Compare(all_m).print()
print("speed-up over the for-loop (median, range over rounds):")
for (impl, desc), r in ratios.items():
    print(f"  {impl:8s} {desc}: {statistics.median(r):.2f}x  [{min(r):.2f} .. {max(r):.2f}]")

# %%
# Verdict
# -------
# The documented ordering holds here if the faster of foreach/fused (by median) beats the
# for-loop by more than 10% for both parameter sets. The middle half of the per-round speed-ups
# decides: a *gain* when even the lower quartile is above 1.10, *no gain* when even the upper
# quartile is below it, *inside the noise* otherwise.
RULE = ("holds if the best of foreach/fused gains >10% over the for-loop for both parameter sets "
        "(lower quartile of the speed-up above 1.10); wrong if for neither (upper quartile below "
        "1.10); depends otherwise, including ratios inside the noise")


def classify(r, threshold):
    """'gain' if even the lower quartile of the per-round ratios beats the threshold, 'no gain' if
    even the upper quartile misses it, 'noise' otherwise (one disturbed round cannot decide)."""
    q1, _, q3 = statistics.quantiles(r, n=4)
    return "gain" if q1 > threshold else "no gain" if q3 < threshold else "noise"


others = [impl for impl in implementations if impl != "for-loop"]
best_impl = {desc: max(others, key=lambda i: statistics.median(ratios[i, desc])) for desc in shapes}
best = {desc: statistics.median(ratios[best_impl[desc], desc]) for desc in shapes}
cls = {desc: classify(ratios[best_impl[desc], desc], 1.10) for desc in shapes}
if all(c == "gain" for c in cls.values()):
    verdict = "holds"
elif all(c == "no gain" for c in cls.values()):
    verdict = "wrong"
else:
    verdict = "depends"
print(f"Verdict: {verdict}. Best speed-up over the for-loop: "
      + ", ".join(f"{d}: {best_impl[d]} {v:.2f}x ({cls[d]})" for d, v in best.items()) + f" on {device}.")
print(f"Rule: {RULE}")

key_impl = "fused" if "fused" in implementations else "foreach"
key_r = ratios[key_impl, "256 x [64, 64]"]
RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": f"{key_impl} speed-up, 256 small tensors", "value": statistics.median(key_r),
            "low": min(key_r), "high": max(key_r), "unit": "x"},
    "measurements": [
        {"variant": f"{impl}, {desc}", "metric": "time per step", "unit": "us",
         "value": statistics.median(us), "spread": max(us) - min(us)}
        for (impl, desc), us in per_call.items()
    ],
    "skipped": skipped,
}

# %%
# When not to use it
# ------------------
# ``foreach`` keeps a list of intermediates for all parameters at once: the docstring warns it
# "uses ~ sizeof(params) more peak memory than the for-loop version". If memory is the limit,
# keep the for-loop. ``fused`` on CPU is beta; check it is supported for your optimizer
# (Adam, AdamW, SGD, Adagrad) and torch version before relying on it.

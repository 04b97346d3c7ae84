"""
Evaluate with ``model.eval()`` *and* ``torch.no_grad()``
========================================================

The 2019 article pairs two switches that are often confused (claim S4-5):

    "When evaluating, one can save memory and time by not tracking history during the forward
    pass for gradient calculation. This is easy to achieve with the `torch.no_grad()` context
    manager."

    "These layers can be switched to eval mode by calling `model.eval()`, and back to training
    mode using `model.train()`."

They do different things. ``eval()`` changes what Dropout and BatchNorm *compute*;
``no_grad()`` changes what autograd *records*. This tip runs each alone and both together on a
model with Dropout and BatchNorm, and measures the memory and time the graph costs.
"""
# sphinx_gallery_tips_claims = ["S4-5"]
# sphinx_gallery_tips_tags = ["inference", "autograd"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "1.0"
# sphinx_gallery_tips_takeaway = "eval() alone still records a graph; no_grad() alone keeps dropout on and updates BatchNorm statistics. Evaluate with both."
# sphinx_gallery_tips_keywords = ["eval", "model.eval()", "no_grad", "torch.no_grad", "dropout", "BatchNorm", "running_mean", "evaluation"]
# sphinx_gallery_tips_related = ["tip_inference_mode"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/notes/autograd.html#locally-disable-grad-doc"]

# %%
# Setup
# -----
import statistics

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)  # small tensors: on a shared machine extra threads only wait on each other
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(256, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Dropout(0.3),
        nn.Linear(256, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Dropout(0.3),
        nn.Linear(256, 10),
    ).to(device)


x = torch.randn(128, 256, device=device)  # [B, 256]


def saved_bytes(fn, model):
    """Bytes autograd keeps for backward during fn(), parameters excluded (they exist anyway)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


# %%
# The four ways to evaluate
# -------------------------
def eval_only(model):
    model.eval()
    return model(x)


def no_grad_only(model):
    model.train()  # the state a model is in right after a training epoch
    with torch.no_grad():
        return model(x)


def both(model):
    model.eval()
    with torch.no_grad():
        return model(x)


def article_order(model):  # the article's snippet: eval() inside the no_grad block
    with torch.no_grad():
        model.eval()
        return model(x)


results = {}
for fn in (eval_only, no_grad_only, both, article_order):
    model = make_model()
    stats_before = model[1].running_mean.clone()
    out1, kept = saved_bytes(lambda: fn(model), model)
    out2 = fn(model)
    results[fn.__name__] = {
        "graph": out1.grad_fn is not None,
        "saved MiB": kept / 2**20,
        "repeatable": torch.equal(out1, out2),
        "BN stats changed": not torch.equal(stats_before, model[1].running_mean),
        "out": out1.detach(),
    }
print(f"{'variant':14s} {'graph':>6s} {'saved for backward':>19s} {'repeatable':>11s} {'BN stats changed':>17s}")
for name, r in results.items():
    print(f"{name:14s} {str(r['graph']):>6s} {r['saved MiB']:15.2f} MiB {str(r['repeatable']):>11s} "
          f"{str(r['BN stats changed']):>17s}")

# %%
# Check
# -----
# ``both`` and the article's ordering give the same outputs as ``eval_only`` (no_grad never
# changes values), and the ordering inside the block does not matter.
torch.testing.assert_close(results["both"]["out"], results["eval_only"]["out"], rtol=0, atol=0)
torch.testing.assert_close(results["article_order"]["out"], results["both"]["out"], rtol=0, atol=0)
r_e, r_n, r_b = results["eval_only"], results["no_grad_only"], results["both"]
checks = {
    "eval() alone still records a graph": r_e["graph"] and r_e["saved MiB"] > 0,
    "no_grad() alone keeps dropout on (outputs differ run to run)": not r_n["repeatable"],
    "no_grad() alone updates BatchNorm running stats": r_n["BN stats changed"],
    "both: no graph, repeatable, stats untouched": (not r_b["graph"] and r_b["repeatable"]
                                                    and not r_b["BN stats changed"]),
}
for name, ok in checks.items():
    print(f"  {'yes' if ok else 'NO '}  {name}")

# %%
# Measurement: time of ``eval()`` alone versus ``eval()`` + ``no_grad()``
# -----------------------------------------------------------------------
# Interleaved rounds with ``torch.utils.benchmark``; ratio = eval-only time / both time.
import torch.utils.benchmark as benchmark

model = make_model().eval()
variants = {"eval only": lambda: model(x), "eval + no_grad": lambda: both(model)}
runs = {name: [] for name in variants}
for _ in range(5):
    for name, fn in variants.items():
        timer = benchmark.Timer("fn()", globals={"fn": fn}, sub_label=name, description="MLP+BN+Dropout forward",
                                num_threads=torch.get_num_threads())
        runs[name].append(timer.blocked_autorange(min_run_time=0.05))
us = {name: [m.median * 1e6 for m in ms] for name, ms in runs.items()}
ratios = [a / b for a, b in zip(us["eval only"], us["eval + no_grad"])]
for name, v in us.items():
    print(f"{name:15s}: {statistics.median(v):8.1f} us per forward  [{min(v):.1f} .. {max(v):.1f}]")
ratio = statistics.median(ratios)
print(f"eval-only / eval+no_grad time: {ratio:.2f}x  [{min(ratios):.2f} .. {max(ratios):.2f}]")
# On a busy machine single rounds can be far off; only the median decides.
time_note = f"{ratio:.2f}x faster than" if ratio > 1.05 else f"not measurably faster ({ratio:.2f}x) than"

# %%
# Verdict
# -------
RULE = ("holds if all 4 checks pass: eval() alone records a graph (bytes saved for backward > 0), "
        "no_grad() alone leaves dropout active and updates BatchNorm statistics, and both together "
        "record nothing and repeat exactly; depends if only some pass; wrong if none do. The time "
        "ratio is reported; it counts as a saving only above 1.05")
passed = sum(checks.values())
verdict = "holds" if passed == len(checks) else ("wrong" if passed == 0 else "depends")
print(f"Verdict: {verdict}. {passed}/{len(checks)} checks pass; no_grad saves "
      f"{r_e['saved MiB']:.2f} MiB of saved activations and is {time_note} eval() alone.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": "activations saved for backward by eval() alone", "value": r_e["saved MiB"], "unit": "MiB"},
    "measurements": [
        {"variant": name, "metric": "time per forward", "unit": "us", "value": statistics.median(v),
         "spread": max(v) - min(v)} for name, v in us.items()
    ] + [
        {"variant": "eval only / eval + no_grad", "metric": "time ratio", "unit": "x", "value": ratio,
         "spread": max(ratios) - min(ratios)},
    ] + [
        {"variant": name, "metric": "saved for backward", "unit": "MiB", "value": r["saved MiB"]}
        for name, r in results.items()
    ],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# Use ``no_grad()`` without ``eval()`` only when you *want* training-mode layers without a
# graph, e.g. Monte-Carlo dropout; and ``eval()`` without ``no_grad()`` when you need gradients
# of an evaluated model (saliency maps, adversarial examples). For pure inference
# ``torch.inference_mode()`` can replace ``no_grad()`` (see the related tip).

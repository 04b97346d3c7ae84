"""
Evaluate with ``model.eval()`` *and* ``torch.no_grad()``
========================================================

The 2019 article pairs two switches that are often confused (claim S4-5). For the first it
says that during evaluation "one can save memory and time by not tracking history during the
forward pass for gradient calculation" with ``torch.no_grad()``; for the second:

    "These layers can be switched to eval mode by calling `model.eval()`, and back to training
    mode using `model.train()`."

They do different things. ``eval()`` changes what Dropout and BatchNorm *compute*;
``no_grad()`` changes what autograd *records*. This tip runs each alone and both together on a
model with Dropout and BatchNorm, and measures the memory and time the recorded graph costs.
"""
# sphinx_gallery_tips_claims = ["S4-5"]
# sphinx_gallery_tips_tags = ["inference", "autograd"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "eval() alone still records a graph and keeps activations; no_grad() alone keeps dropout on and updates BatchNorm statistics. Evaluate with both."
# sphinx_gallery_tips_keywords = ["eval", "model.eval()", "no_grad", "torch.no_grad", "dropout", "BatchNorm", "running_mean", "evaluation"]
# sphinx_gallery_tips_related = ["tip_inference_mode"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/notes/autograd.html#locally-disable-grad-doc"]
# sphinx_gallery_tips_rules = ["PTT023"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). Facts are
# what the tip observed on this device (a graph recorded or not, outputs repeatable or not).
# Memory is compared from exact byte counts; time in alternating rounds with
# ``torch.utils.benchmark``, each round giving one ratio, whose ~95% confidence interval is
# compared with the rule's threshold. A verdict is the first case of the rule whose conditions
# the measurements meet.
from tipsite.tipkit import compare_times, compare_values, decide, report


# %%
# Setup
# -----
# One CPU thread: the graph's cost is bookkeeping per op, and one thread keeps small ops from
# stalling on a busy machine. A GPU needs a larger model before the arithmetic dominates.
import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")
width, batch = {"cpu": (256, 128), "cuda": (1024, 512)}[device.type]


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(width, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Dropout(0.3),
        nn.Linear(width, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Dropout(0.3),
        nn.Linear(width, 10),
    ).to(device)


x = torch.randn(batch, width, device=device)  # [B, width]


def saved_bytes(fn, model):
    """Bytes autograd keeps for backward during fn(), parameters left out."""
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
# The anti-pattern and the recommended pattern: four ways to evaluate
# -------------------------------------------------------------------
# ``no_grad_only`` starts from training mode: the state a model is in right after an epoch.
def eval_only(model):  # anti-pattern: eval() alone still records a graph
    model.eval()
    return model(x)


def no_grad_only(model):
    model.train()
    with torch.no_grad():
        return model(x)


def both(model):  # recommended: both switches
    model.eval()
    with torch.no_grad():
        return model(x)


def article_order(model):  # recommended, in the article's order: eval() in no_grad
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
        "MiB": kept / 2**20,
        "repeatable": torch.equal(out1, out2),
        "stats changed": not torch.equal(stats_before, model[1].running_mean),
        "out": out1.detach(),
    }
print(f"{'variant':14s} {'graph':>6s} {'saved for backward':>19s} {'repeatable':>11s} "
      f"{'BN stats changed':>17s}")
for name, r in results.items():
    print(f"{name:14s} {r['graph']!s:>6s} {r['MiB']:15.2f} MiB "
          f"{r['repeatable']!s:>11s} {r['stats changed']!s:>17s}")

# %%
# Check
# -----
# ``no_grad`` never changes values: ``both`` and the article's ordering give the outputs of
# ``eval_only``, so the order of the two switches inside the block does not matter.
outs = {name: r["out"] for name, r in results.items()}
torch.testing.assert_close(outs["both"], outs["eval_only"], rtol=0, atol=0)
torch.testing.assert_close(outs["article_order"], outs["both"], rtol=0, atol=0)
r_e, r_n, r_b = results["eval_only"], results["no_grad_only"], results["both"]
facts = {
    "eval() alone: graph recorded": r_e["graph"],
    "no_grad() alone: dropout active": not r_n["repeatable"],
    "no_grad() alone: BatchNorm statistics change": r_n["stats changed"],
    "eval() + no_grad(): graph recorded": r_b["graph"],
    "eval() + no_grad(): repeatable, statistics kept": (
        r_b["repeatable"] and not r_b["stats changed"]),
}

# %%
# Measurement: what the graph of ``eval()`` alone costs
# -----------------------------------------------------
# Memory: the bytes autograd keeps for backward, counted above. Time: one forward of the model,
# already in eval mode, with and without ``no_grad`` (nothing else inside the timed calls).
memory = compare_values(
    "memory, eval() alone - with no_grad()",
    {"eval() alone": [r_e["MiB"]], "eval() + no_grad()": [r_b["MiB"]]},
    threshold=0.0, device=device, metric="saved for backward", unit="MiB",
    measure="difference")

model = make_model().eval()


def forward_graph():
    return model(x)


def forward_no_grad():
    with torch.no_grad():
        return model(x)


speed = compare_times("time, eval() alone / with no_grad()",
                      {"eval() alone": forward_graph,
                       "eval() + no_grad()": forward_no_grad},
                      threshold=1.0, device=device, x=width, budget_s=1.0)

# %%
# Verdict
# -------
# The claim is that evaluation needs both switches. It holds if each switch alone leaves
# something undone that the pair does: ``eval()`` alone records a graph that keeps memory and is
# not faster, ``no_grad()`` alone leaves dropout and BatchNorm in training behaviour. If either
# switch alone did the other's job the pairing would be needless: wrong. Recording a graph is
# work the host does (autograd nodes, references to saved tensors), so on a GPU the time is a
# claim about the host: a timing the host bound counts (``about="host"``).
RULE = ("holds if eval() alone records a graph (memory kept > 0, time not lower than "
        "with no_grad), no_grad() alone leaves dropout active and BatchNorm statistics "
        "changing, and the pair records nothing and repeats exactly; wrong if eval() "
        "alone records no graph and no_grad() alone switches the layers; depends "
        "otherwise. The time is the host's cost of recording the graph: on a GPU a "
        "host-bound timing counts")
decision = decide(
    device,
    [("holds", {"eval() alone: graph recorded": True,
                "no_grad() alone: dropout active": True,
                "no_grad() alone: BatchNorm statistics change": True,
                "eval() + no_grad(): graph recorded": False,
                "eval() + no_grad(): repeatable, statistics kept": True,
                "memory": "all above", "time": "none below"}),
     ("wrong", {"eval() alone: graph recorded": False,
                "no_grad() alone: dropout active": False,
                "no_grad() alone: BatchNorm statistics change": False}),
     ("depends", {})],
    groups={"memory": [memory], "time": [speed]}, facts=facts, key=memory,
    about="host")
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": [], "skipped": []}

# %%
# When not to use it
# ------------------
# Use ``no_grad()`` without ``eval()`` only when you *want* training-mode layers without a
# graph, e.g. Monte-Carlo dropout; and ``eval()`` without ``no_grad()`` when you need gradients
# of an evaluated model (saliency maps, adversarial examples). The time saved by ``no_grad`` is
# a cost per op, so it is largest for small models (the related ``inference_mode`` tip
# measures it across sizes); the memory saved grows with batch and model size. For pure
# inference ``torch.inference_mode()`` can replace ``no_grad()``.

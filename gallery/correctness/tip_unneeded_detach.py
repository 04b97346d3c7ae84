"""
An unneeded ``.detach()`` silently freezes the layers before it
===============================================================

The article (claim S3-3):

    "Detaching a tensor from a computational graph (by `.detach()`) is usually not a good idea.
    This prevents propagating the gradient to the graph before that computational node."

It backs this with a two-layer example and its printed output: with ``hidden.detach()`` the
first layer's mean weight stays at ``-0.0136`` after ``optim.step()``; without it, it moves to
``0.0113``. This tip runs that code verbatim, then without the ``.detach()`` line, and checks
both the behaviour and the printed numbers.
"""
# sphinx_gallery_tips_claims = ["S3-3"]
# sphinx_gallery_tips_tags = ["autograd", "training"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "1.0"
# sphinx_gallery_tips_takeaway = "detach() cuts the graph: layers before it get grad None and optimizer.step() leaves them unchanged, with no error."
# sphinx_gallery_tips_keywords = ["detach", ".detach()", "gradient", "computational graph", "frozen layer", "grad is None"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.Tensor.detach.html"]
# sphinx_gallery_tips_related = ["tip_mean_loss_leak"]

# %%
# The article's code, verbatim
# ----------------------------
import torch  # noqa: I001 -- the article's code, kept verbatim
torch.random.manual_seed(42)
layer_1, layer_2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
data, labels = torch.rand(3, 16), torch.rand(1, 16)

hidden = layer_1(data)
# Don't
hidden = hidden.detach()
output = layer_2(hidden)

(output - labels).sum().backward()  # MSE loss
optim = torch.optim.SGD(list(layer_1.parameters()) + list(layer_2.parameters()), lr=1e-1)

print(layer_1.weight.mean())
optim.step()
print(layer_1.weight.mean())

# %%
# Check: did ``layer_1`` move?
# ----------------------------
# Re-create ``layer_1``'s initial weights from the same seed and compare bit for bit. ``SGD``
# skips parameters whose ``.grad`` is ``None``, which is what ``.detach()`` left behind.
torch.random.manual_seed(42)
initial = torch.nn.Linear(16, 16)
detached_unchanged = torch.equal(layer_1.weight, initial.weight) and torch.equal(layer_1.bias, initial.bias)
print("with detach: layer_1.weight.grad is", layer_1.weight.grad, "| layer_2 has a grad:",
      layer_2.weight.grad is not None)
print("with detach: layer_1 bit-identical to its initial weights:", detached_unchanged)
mean_detached = layer_1.weight.mean().item()


# %%
# The fix: the same code without ``.detach()``
# --------------------------------------------
# Also note the article's ``# MSE loss`` comment: ``(output - labels).sum()`` is a plain sum
# (``labels`` ``[1, 16]`` broadcast against ``output`` ``[3, 16]``); it is kept here so the
# numbers compare with the article's.
def run_without_detach():
    torch.random.manual_seed(42)
    layer_1, layer_2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
    data, labels = torch.rand(3, 16), torch.rand(1, 16)  # [3, 16], [1, 16]
    hidden = layer_1(data)  # [3, 16], still attached to layer_1's graph
    output = layer_2(hidden)  # [3, 16]
    (output - labels).sum().backward()
    optim = torch.optim.SGD(list(layer_1.parameters()) + list(layer_2.parameters()), lr=1e-1)
    before = layer_1.weight.mean().item()
    initial = layer_1.weight.detach().clone()  # [16, 16]
    optim.step()
    moved = (layer_1.weight.detach() != initial).float().mean().item()  # fraction of entries updated
    return before, layer_1.weight.mean().item(), layer_1.weight.grad is not None, moved


before, after, has_grad, moved_without = run_without_detach()
moved_with = (layer_1.weight.detach() != initial.weight.detach()).float().mean().item()
print(f"without detach: layer_1.weight.mean() {before:.4f} -> {after:.4f} (grad present: {has_grad})")
print(f"share of layer_1's weights updated by the step: with detach {moved_with:.0%}, without {moved_without:.0%}")

# %%
# Verdict
# -------
# The printed figures are compared with the article's to 4 decimals (they depend on the seed
# stream of ``torch.rand``, which can change across releases; the behaviour does not).
article = {"before": -0.0136, "after, no detach": 0.0113}
matches = round(mean_detached, 4) == article["before"] and round(after, 4) == article["after, no detach"]
print(f"article's printed numbers reproduced: {matches} "
      f"(here {mean_detached:.4f} and {after:.4f}; article {article['before']} and {article['after, no detach']})")
RULE = ("holds if, with .detach(), layer_1 gets no gradient and stays bit-identical after "
        "optim.step() while, without it, layer_1 gets a gradient and its weights change; "
        "wrong otherwise")
verdict = "holds" if (detached_unchanged and layer_1.weight.grad is None and has_grad
                      and moved_without > 0 and moved_with == 0) else "wrong"
print(f"Verdict: {verdict}. Mean weight change of layer_1: with detach "
      f"{mean_detached - initial.weight.mean().item():+.4f}, without {after - before:+.4f}.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": "share of layer_1's weights updated, with detach", "value": 100 * moved_with, "unit": "%"},
    "measurements": [
        {"variant": "with .detach()", "metric": "layer_1 weights updated", "value": 100 * moved_with, "unit": "%"},
        {"variant": "without .detach()", "metric": "layer_1 weights updated", "value": 100 * moved_without,
         "unit": "%"},
        {"variant": "with .detach()", "metric": "layer_1.weight.mean() after step", "value": mean_detached,
         "unit": ""},
        {"variant": "without .detach()", "metric": "layer_1.weight.mean() before step", "value": before,
         "unit": ""},
        {"variant": "without .detach()", "metric": "layer_1.weight.mean() after step", "value": after,
         "unit": ""},
    ],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# ``.detach()`` is right exactly where gradients must stop: target networks in RL, the
# straight-through and Gumbel-softmax tricks the article links to, stop-gradient branches in
# self-supervised learning, and values you only log or accumulate (see the related tip on a
# running-loss leak). Detach on purpose, and assert ``.grad is not None`` on the layers you mean to train.

"""
An unneeded ``.detach()`` silently freezes the layers before it
===============================================================

The article (claim S3-3):

    "Detaching a tensor from a computational graph (by `.detach()`) is usually not a good idea.
    This prevents propagating the gradient to the graph before that computational node."

It backs this with a two-layer example and its printed output: with ``hidden.detach()`` the
first layer's mean weight stays at ``-0.0136`` after ``optim.step()``; without it, it moves to
``0.0113``. This tip runs that code as printed, then the same two layers with and without the
``.detach()`` line on this device, and checks what reaches the first layer.
"""
# sphinx_gallery_tips_claims = ["S3-3"]
# sphinx_gallery_tips_tags = ["autograd", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "detach() cuts the graph: layers before it get grad None and optimizer.step() leaves them unchanged, with no error or warning."
# sphinx_gallery_tips_keywords = ["detach", ".detach()", "gradient", "computational graph", "frozen layer", "grad is None"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.Tensor.detach.html"]
# sphinx_gallery_tips_related = ["tip_mean_loss_leak"]
# sphinx_gallery_tips_rules = ["PTT025"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). This tip
# times nothing: its verdict rests on *facts*, what it observed on this device (a gradient
# present or not, weights changed or not). A verdict is the first case of the rule whose
# conditions the facts meet.
from tipsite.tipkit import decide, report


# %%
# The article's code, as printed
# ------------------------------
# On the CPU, as the article ran it, so that its printed numbers can be compared.
import torch  # noqa: I001 -- the article's code, kept as printed
torch.random.manual_seed(42)
layer_1, layer_2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
data, labels = torch.rand(3, 16), torch.rand(1, 16)

hidden = layer_1(data)
# Don't
hidden = hidden.detach()
output = layer_2(hidden)

(output - labels).sum().backward()  # MSE loss
params = list(layer_1.parameters()) + list(layer_2.parameters())
optim = torch.optim.SGD(params, lr=1e-1)

print(layer_1.weight.mean())
optim.step()
print(layer_1.weight.mean())

# %%
# The article prints ``-0.0136`` twice here, and ``0.0113`` after the step without
# ``.detach()``. The numbers depend on the random stream of ``torch.rand``, which may change
# across releases; the behaviour below does not.
printed_after_detach = round(layer_1.weight.mean().item(), 4)
print("this run prints", printed_after_detach, "| the article printed -0.0136")

# %%
# Setup
# -----
# The same two layers on this device, built from one seed for both variants. The article's
# ``# MSE loss`` is a plain sum of differences (``labels`` ``[1, 16]`` broadcast against
# ``output`` ``[3, 16]``); it is kept so the example stays the article's.
import warnings

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, torch {torch.__version__}")


# %%
# The anti-pattern and the fix
# ----------------------------
def train_step(detach):
    torch.random.manual_seed(42)
    layer_1 = torch.nn.Linear(16, 16).to(device)
    layer_2 = torch.nn.Linear(16, 16).to(device)
    data = torch.rand(3, 16, device=device)  # [3, 16]
    labels = torch.rand(1, 16, device=device)  # [1, 16]
    initial = layer_1.weight.detach().clone()  # [16, 16]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hidden = layer_1(data)  # [3, 16]
        if detach:
            hidden = hidden.detach()  # the anti-pattern: cut from layer_1's graph
        output = layer_2(hidden)  # [3, 16]
        (output - labels).sum().backward()
        optim = torch.optim.SGD(list(layer_1.parameters()) + list(layer_2.parameters()),
                                lr=1e-1)
        optim.step()
    return {"output": output.detach(), "layer_2 grad": layer_2.weight.grad.clone(),
            "layer_1 has grad": layer_1.weight.grad is not None,
            "layer_1 changed": not torch.equal(layer_1.weight.detach(), initial),
            "share changed": (layer_1.weight.detach() != initial).float().mean().item(),
            "warnings": len(caught)}


with_detach, without = train_step(detach=True), train_step(detach=False)

# %%
# Check: the same forward pass, a different backward pass
# -------------------------------------------------------
# ``.detach()`` changes no value going forward, and the layer after it gets the same gradient;
# only what flows back into ``layer_1`` differs.
torch.testing.assert_close(with_detach["output"], without["output"], rtol=0, atol=0)
torch.testing.assert_close(with_detach["layer_2 grad"], without["layer_2 grad"])
for name, r in (("with .detach()", with_detach), ("without", without)):
    print(f"{name:15s} layer_1 gets a gradient: {r['layer_1 has grad']!s:5s} "
          f"| changed by the step: {r['layer_1 changed']!s:5s} "
          f"| warnings: {r['warnings']}")

# %%
# Verdict
# -------
RULE = ("holds if, with .detach(), layer_1 gets no gradient and the optimizer step "
        "leaves it unchanged while, without it, layer_1 gets a gradient and changes; "
        "wrong if layer_1 changes with .detach() too; depends otherwise")
facts = {
    "with .detach(): layer_1 gets a gradient": with_detach["layer_1 has grad"],
    "with .detach(): layer_1 changed by the step": with_detach["layer_1 changed"],
    "with .detach(): warnings raised": with_detach["warnings"],
    "without: layer_1 gets a gradient": without["layer_1 has grad"],
    "without: layer_1 changed by the step": without["layer_1 changed"],
}
decision = decide(device,
                  [("holds", {"with .detach(): layer_1 gets a gradient": False,
                              "with .detach(): layer_1 changed by the step": False,
                              "without: layer_1 gets a gradient": True,
                              "without: layer_1 changed by the step": True}),
                   ("wrong", {"with .detach(): layer_1 changed by the step": True}),
                   ("depends", {})],
                  facts=facts,
                  key={"name": "of layer_1's weights changed by the step, detached",
                       "value": 100 * with_detach["share changed"], "unit": "%"})
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": [], "skipped": []}

# %%
# When not to use it
# ------------------
# ``.detach()`` is right exactly where gradients must stop: target networks in RL, the
# straight-through and Gumbel-softmax tricks the article links to, stop-gradient branches in
# self-supervised learning, and values you only log or accumulate (see the related tip on a
# running-loss leak). Nothing warns when a detach cuts a layer off, as the warning count above
# shows: detach on purpose, and check ``.grad is not None`` on the layers you mean to train.

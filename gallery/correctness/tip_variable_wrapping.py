"""
``Variable`` wrapping is a leftover: tensors do autograd
========================================================

The 2019 article (claim S4-4):

    "In earlier versions of PyTorch it was required to wrap Tensors in Variables to make them
    differentiable. [...] Since PyTorch 0.4.0 however, `Tensor` is merged with `Variable`, so
    now to allocate a `Tensor` that requires gradients to be computed with respect to it, one
    can simply do ``torch.tensor([1.0, 2.0], requires_grad=True)``"

``torch.autograd.Variable`` still exists for old code. The autograd docs list it under
"Variable (deprecated)": "The Variable API has been deprecated: Variables are no longer
necessary to use autograd with tensors." This tip checks what calling it does today: what type
comes back, whether it copies, whether it warns, and whether a training step differs.
"""
# sphinx_gallery_tips_claims = ["S4-4"]
# sphinx_gallery_tips_tags = ["autograd"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "0.4"
# sphinx_gallery_tips_takeaway = "Drop Variable(t): it returns t detached, harmless on input data but it silently cuts the graph on an intermediate; use requires_grad_()."
# sphinx_gallery_tips_keywords = ["Variable", "torch.autograd.Variable", "requires_grad", "volatile", "deprecated", "0.4 migration"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/autograd.html#variable-deprecated"]
# sphinx_gallery_tips_rules = ["PTT007"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). This tip
# times nothing: its verdict rests on *facts*, what it observed on this device (the type a
# call returns, gradients equal or not). A verdict is the first case of the rule whose
# conditions the facts meet.
from tipsite.tipkit import decide, report


# %%
# Setup
# -----
import warnings

import torch
from torch.autograd import Variable

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, torch {torch.__version__}")
facts = {}

# %%
# The anti-pattern and the recommended pattern: what ``Variable(x)`` returns
# --------------------------------------------------------------------------
x = torch.randn(4, 3, device=device)  # [4, 3]
# anti-pattern: the 0.3-era wrapping
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    v = Variable(x)
    v_grad = Variable(x, requires_grad=True)
print("type(Variable(x)):", type(v).__name__, "| same object as x:", v is x,
      "| shares x's memory:", v.data_ptr() == x.data_ptr())
print("Variable(x, requires_grad=True).requires_grad:", v_grad.requires_grad,
      "| x.requires_grad untouched:", not x.requires_grad)
print("isinstance(x, Variable) for a plain tensor:", isinstance(x, Variable))
facts["type of Variable(x)"] = type(v).__name__
facts["Variable(x) shares x's memory"] = v.data_ptr() == x.data_ptr()
facts["Variable(x, requires_grad=True) requires grad"] = v_grad.requires_grad
facts["warnings from Variable(x) calls"] = len(caught)

# Recommended, the current spelling of the same thing:
t = torch.tensor([1.0, 2.0], requires_grad=True)
t2 = x.clone().requires_grad_()
print("torch.tensor(..., requires_grad=True):", t.requires_grad,
      "| x.clone().requires_grad_():", t2.requires_grad)

# %%
# The one argument that warns: ``volatile``
# -----------------------------------------
# ``volatile=True`` was 0.3's way to switch off graph building for inference. Today it is
# accepted with a warning, and the graph is built anyway.
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    vol = Variable(x, volatile=True)
    out = (vol * torch.ones(3, device=device, requires_grad=True)).sum()
for w in caught:
    print(f"Variable(x, volatile=True) warns, {w.category.__name__}:\n  {w.message}")
print("...and the result still records a graph:", out.grad_fn is not None)
facts["volatile=True: graph still recorded"] = out.grad_fn is not None

# %%
# Check: a training step with and without the wrapping
# ----------------------------------------------------
# The article's loop ``x, y = Variable(x), Variable(y)`` against plain tensors. Here
# ``Variable`` wraps input data, leaves that need no gradient.
data = torch.randn(16, 3, device=device)  # [B, 3]
target = torch.randn(16, 1, device=device)  # [B, 1]
grads = {}
for name in ("Variable-wrapped", "plain tensors"):
    torch.manual_seed(1)
    model = torch.nn.Linear(3, 1).to(device)
    xb, yb = data, target
    if name == "Variable-wrapped":
        xb, yb = Variable(xb), Variable(yb)  # the article's 0.3-era loop
    torch.nn.functional.mse_loss(model(xb), yb).backward()
    grads[name] = model.weight.grad.clone()
same = torch.equal(*grads.values())
print("gradients identical with and without Variable() on the inputs:", same)
facts["same gradients without Variable() on inputs"] = same

# %%
# Check: wrapping an intermediate result
# --------------------------------------
# Old code also wrapped results inside a model, ``Variable(layer1(x))``. Today ``Variable(t)``
# builds a new tensor from ``t``'s data, cut from the graph like ``t.detach()``. Does
# ``layer1`` still get a gradient, with the wrapping and without it?
reaches = {}
for name in ("through Variable(layer1(x))", "without Variable"):
    torch.manual_seed(1)
    layer1 = torch.nn.Linear(3, 4).to(device)
    layer2 = torch.nn.Linear(4, 1).to(device)
    hidden = layer1(data)  # [B, 4]
    if name == "through Variable(layer1(x))":
        hidden = Variable(hidden)  # wrapped mid-model
        print("Variable(layer1(x)).grad_fn:", hidden.grad_fn,
              "| requires_grad:", hidden.requires_grad)
    torch.nn.functional.mse_loss(layer2(hidden), target).backward()
    reaches[name] = layer1.weight.grad is not None
    print(f"layer1 gets a gradient {name}:", reaches[name])
    facts[f"layer1 gets a gradient {name}"] = reaches[name]

# %%
# Verdict
# -------
# The claim is that the wrapping is no longer needed. It holds if ``Variable`` today returns a
# plain tensor, carries ``requires_grad`` over, and plain tensors do everything the wrapping
# did: the same gradients on the inputs, and a gradient to ``layer1`` without any wrapping.
# It is wrong if dropping the wrapping changes the input gradients, or if ``layer1`` gets a
# gradient only through ``Variable``. Whether ``Variable(layer1(x))`` cuts ``layer1`` off is
# printed above: if it does, the wrapping is not just unneeded but harmful.
RULE = ("wrong if the gradients on Variable-wrapped inputs differ from plain "
        "tensors, or layer1 gets a gradient through Variable(layer1(x)) but not "
        "without Variable; holds if Variable(x) returns a plain torch.Tensor, "
        "requires_grad=True reaches the result, gradients on wrapped inputs are "
        "identical, and layer1 gets a gradient without Variable; depends otherwise")
decision = decide(device,
                  [("wrong", {"same gradients without Variable() on inputs": False}),
                   ("wrong", {"layer1 gets a gradient without Variable": False,
                              "layer1 gets a gradient through Variable(layer1(x))":
                                  True}),
                   ("holds", {"type of Variable(x)": "Tensor",
                              "Variable(x, requires_grad=True) requires grad": True,
                              "same gradients without Variable() on inputs": True,
                              "layer1 gets a gradient without Variable":
                                  True}),
                   ("depends", {})],
                  facts=facts)
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": [], "skipped": []}

# %%
# When not to use it
# ------------------
# Nothing is gained by keeping ``Variable``, and it can cost: ``Variable(t)`` returns ``t``
# detached, without a warning (none above). On input data that changes nothing; on an
# intermediate result, or on a leaf that requires grad, it silently cuts the graph. Remove
# it; where old code used ``volatile=True`` use ``torch.no_grad()`` or
# ``torch.inference_mode()``, and ``.data`` becomes ``.detach()``.

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
# sphinx_gallery_tips_takeaway = "Variable(x) returns a plain Tensor sharing x's data, silently; drop it and use requires_grad=True or requires_grad_()."
# sphinx_gallery_tips_keywords = ["Variable", "torch.autograd.Variable", "requires_grad", "volatile", "deprecated", "0.4 migration"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/autograd.html#variable-deprecated"]

# %%
# Setup
# -----
import warnings

import torch
from torch.autograd import Variable

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, torch {torch.__version__}")
checks = {}

# %%
# What ``Variable(x)`` returns
# ----------------------------
x = torch.randn(4, 3, device=device)  # [4, 3]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    v = Variable(x)
    v_grad = Variable(x, requires_grad=True)
plain_call_warnings = [str(w.message) for w in caught]
print("type(Variable(x)):", type(v).__name__, "| same object as x:", v is x,
      "| shares x's memory:", v.data_ptr() == x.data_ptr())
print("Variable(x, requires_grad=True).requires_grad:", v_grad.requires_grad,
      "| x.requires_grad untouched:", x.requires_grad)
print("isinstance(x, Variable) for a plain tensor:", isinstance(x, Variable))
print("warnings from the calls above:", plain_call_warnings or "none")
checks["Variable(x) returns a plain torch.Tensor"] = type(v) is torch.Tensor and isinstance(x, Variable)
checks["it is a no-copy alias of x"] = v.data_ptr() == x.data_ptr()
checks["requires_grad=True maps onto the tensor flag"] = v_grad.requires_grad and not x.requires_grad

# The modern spelling of the same thing:
t = torch.tensor([1.0, 2.0], requires_grad=True)
t2 = x.clone().requires_grad_()
print("torch.tensor(..., requires_grad=True):", t.requires_grad, "| x.clone().requires_grad_():", t2.requires_grad)

# %%
# The one argument that does warn: ``volatile``
# ---------------------------------------------
# ``volatile=True`` was 0.3's way to switch off graph building for inference. It is accepted
# and ignored, with a warning; gradients are still recorded.
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    vol = Variable(x, volatile=True)
    out = (vol * torch.ones(3, device=device, requires_grad=True)).sum()
volatile_warnings = [f"{w.category.__name__}: {w.message}" for w in caught]
print("Variable(x, volatile=True) warns:", volatile_warnings or "nothing")
print("...and the result still builds a graph: grad_fn =", type(out.grad_fn).__name__)
checks["volatile is ignored (graph still built)"] = out.grad_fn is not None

# %%
# Check: a training step with and without the wrapping
# ----------------------------------------------------
# The article's loop ``x, y = Variable(x), Variable(y)`` against plain tensors.
data = torch.randn(16, 3, device=device)  # [B, 3]
target = torch.randn(16, 1, device=device)  # [B, 1]
grads = {}
for name in ("Variable-wrapped", "plain tensors"):
    torch.manual_seed(1)
    model = torch.nn.Linear(3, 1).to(device)
    xb, yb = (Variable(data), Variable(target)) if name == "Variable-wrapped" else (data, target)
    torch.nn.functional.mse_loss(model(xb), yb).backward()
    grads[name] = model.weight.grad.clone()
torch.testing.assert_close(grads["Variable-wrapped"], grads["plain tensors"], rtol=0, atol=0)
print("gradients identical with and without Variable():", torch.equal(*grads.values()))
checks["identical gradients"] = torch.equal(*grads.values())

# %%
# Verdict
# -------
# The claim is that wrapping is no longer needed. It holds if ``Variable`` today is a no-op
# alias returning a plain tensor and a training step is bit-identical without it.
for name, ok in checks.items():
    print(f"  {'yes' if ok else 'NO '}  {name}")
RULE = ("holds if all 5 checks pass: Variable(x) returns a plain torch.Tensor aliasing x, "
        "requires_grad maps onto the tensor flag, volatile is ignored, and gradients are identical "
        "without the wrapping; wrong if the wrapping changes results or types; depends otherwise")
passed = sum(checks.values())
if not checks["identical gradients"] or not checks["Variable(x) returns a plain torch.Tensor"]:
    verdict = "wrong"
elif passed == len(checks):
    verdict = "holds"
else:
    verdict = "depends"
print(f"Verdict: {verdict}. {passed}/{len(checks)} checks pass; plain Variable() calls warn: "
      f"{'yes' if plain_call_warnings else 'no'}, volatile=True warns: {'yes' if volatile_warnings else 'no'}.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": "checks passing", "value": float(passed), "unit": f"of {len(checks)}"},
    "measurements": [
        {"variant": "Variable(x)", "metric": "warnings raised", "value": float(len(plain_call_warnings)),
         "unit": ""},
        {"variant": "Variable(x, volatile=True)", "metric": "warnings raised",
         "value": float(len(volatile_warnings)), "unit": ""},
    ],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# Nothing is gained by keeping ``Variable``: it silently does nothing, so it misleads readers
# into thinking it matters. Remove it; where old code used ``volatile=True`` use
# ``torch.no_grad()`` or ``torch.inference_mode()``, and ``.data`` becomes ``.detach()``.

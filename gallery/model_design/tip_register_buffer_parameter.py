"""
``register_parameter`` for dynamic names, ``register_buffer`` for state
=======================================================================

Two neighbouring bullets of one README (claim S2-4):

    "Need to set parameter names dynamically? Use this example,
    `zero=0;self.register_parameter(f"name_{zero}")`. They can be accessed with `model.name_0`."

    "Have something in model which is necessary for forward pass but does not require backprop?
    define those variables with `self.register_buffer`."

This tip runs the example exactly as written, then the corrected call. It then puts the same
tensor in a module three ways (a plain attribute, a buffer, a non-persistent buffer) and checks
what ``state_dict``, ``.to()``, ``.double()`` and ``.parameters()`` see of each.
"""
# sphinx_gallery_tips_claims = ["S2-4"]
# sphinx_gallery_tips_tags = ["module-design"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "1.6"
# sphinx_gallery_tips_takeaway = "register_parameter needs the Parameter too; a plain tensor attribute is missed by state_dict, .to() and .double(), a buffer is not."
# sphinx_gallery_tips_keywords = ["register_buffer", "register_parameter", "persistent", "state_dict", "nn.Parameter", "buffers"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_buffer"]

# %%
# Setup
# -----
import torch
from torch import nn

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, torch {torch.__version__}")
checks = {}


# %%
# The article's example, verbatim
# -------------------------------
class Verbatim(nn.Module):
    def __init__(self):
        super().__init__()
        zero=0;self.register_parameter(f"name_{zero}")  # noqa: E702,E231 -- as published


try:
    Verbatim()
    checks["article's snippet raises"] = False
except TypeError as err:
    print("the article's snippet raises TypeError:", err)
    checks["article's snippet raises"] = True


# %%
# The corrected call
# ------------------
# ``register_parameter(name, param)`` needs the ``nn.Parameter`` (or ``None``) to register.
# ``setattr`` with an ``nn.Parameter`` does the same thing, and ``nn.ParameterDict`` keeps a
# dynamic set of names together.
class Dynamic(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        for i in range(n):
            self.register_parameter(f"name_{i}", nn.Parameter(torch.zeros(4)))  # [4] each


model = Dynamic()
print("model.name_0:", model.name_0)
print("named parameters:", [name for name, _ in model.named_parameters()])
checks["corrected call: model.name_0 is a registered Parameter"] = (
    isinstance(model.name_0, nn.Parameter) and "name_0" in dict(model.named_parameters()))


# %%
# A plain tensor attribute versus a buffer
# ----------------------------------------
# ``scale`` is needed in ``forward`` but never trained, the case the second bullet describes.
class Normaliser(nn.Module):
    def __init__(self):
        super().__init__()
        self.plain_scale = torch.full((4,), 2.0)  # [4]: anti-pattern, module does not know it
        self.register_buffer("scale", torch.full((4,), 2.0))  # [4]: saved and moved with it
        self.register_buffer("cache", torch.zeros(4), persistent=False)  # [4]: moved, not saved
        self.lin = nn.Linear(4, 4)

    def forward(self, x):  # x: [B, 4]
        return self.lin(x * self.scale)


net = Normaliser()
keys = list(net.state_dict())
print("state_dict keys:", keys)
checks["buffer in state_dict, plain attribute not"] = "scale" in keys and "plain_scale" not in keys
checks["non-persistent buffer not in state_dict"] = "cache" not in keys and "cache" in dict(net.named_buffers())

net.double()
dtypes = {n: getattr(net, n).dtype for n in ("plain_scale", "scale", "cache")}
print(".double():", {n: str(d) for n, d in dtypes.items()})
checks[".double() converts buffers, not the plain attribute"] = (
    dtypes["scale"] == dtypes["cache"] == torch.float64 and dtypes["plain_scale"] == torch.float32)

# Moving: on a CPU-only build the "meta" device shows the same rule with no GPU at hand.
target = torch.device("cuda") if torch.cuda.is_available() else torch.device("meta")
net.to(target)
devices = {n: getattr(net, n).device.type for n in ("plain_scale", "scale", "cache")}
print(f".to({target.type!r}):", devices)
checks[".to() moves buffers, not the plain attribute"] = (
    devices["scale"] == devices["cache"] == target.type and devices["plain_scale"] == "cpu")

net = Normaliser()
in_params = [n for n, _ in net.named_parameters()]
checks["buffers are not parameters (optimizer never sees them)"] = not {"scale", "cache"} & set(in_params)
print("parameters:", in_params, "| buffers:", [n for n, _ in net.named_buffers()])

# What the plain attribute costs after a round trip through a checkpoint:
net.plain_scale.fill_(3.0)
net.scale.fill_(3.0)
restored = Normaliser()
restored.load_state_dict(net.state_dict())
print(f"after save/load: buffer scale {restored.scale[0].item()}, plain attribute {restored.plain_scale[0].item()}"
      " (the changed plain value is lost)")
checks["a changed plain attribute is lost through state_dict"] = (
    restored.scale[0].item() == 3.0 and restored.plain_scale[0].item() == 2.0)

# %%
# Verdict
# -------
for name, ok in checks.items():
    print(f"  {'yes' if ok else 'NO '}  {name}")
RULE = ("holds if the article's snippet runs and every buffer check passes; depends if the "
        "snippet as written raises but the corrected register_parameter call and all buffer "
        "checks work; wrong if the corrected call or the buffer checks fail")
snippet_runs = not checks["article's snippet raises"]
rest = {k: v for k, v in checks.items() if k != "article's snippet raises"}
if not all(rest.values()):
    verdict = "wrong"
elif snippet_runs:
    verdict = "holds"
else:
    verdict = "depends"
print(f"Verdict: {verdict}. Snippet as written raises: {not snippet_runs}; "
      f"{sum(rest.values())}/{len(rest)} checks of the corrected advice pass.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": "checks of the corrected advice passing", "value": float(sum(rest.values())),
            "unit": f"of {len(rest)}"},
    "measurements": [],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# Constants that never change and need no device (a Python float, a shape) can stay plain
# attributes. Use ``persistent=False`` for buffers that are cheap to recompute (masks,
# positional tables), so checkpoints stay small and loading older checkpoints does not fail on
# a missing key.

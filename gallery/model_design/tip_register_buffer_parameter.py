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
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "register_parameter needs the Parameter too; a plain tensor attribute is missed by state_dict, .to() and .double(), a buffer is not."
# sphinx_gallery_tips_keywords = ["register_buffer", "register_parameter", "persistent", "state_dict", "nn.Parameter", "buffers"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_buffer"]
# sphinx_gallery_tips_related = ["tip_tensors_in_forward", "tip_module_list"]
# sphinx_gallery_tips_rules = ["PTT029", "PTT030"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). This tip
# times nothing: its verdict rests on *facts*, what it observed on this device (an error
# raised, what ``state_dict``, ``.to()`` and ``.double()`` reach). A verdict is the first case
# of the rule whose conditions the facts meet.
from tipsite.tipkit import decide, report


# %%
# Setup
# -----
import torch
from torch import nn

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, torch {torch.__version__}")
facts = {}


# %%
# The article's example, as printed
# ---------------------------------
class AsPrinted(nn.Module):
    def __init__(self):
        super().__init__()
        zero=0;self.register_parameter(f"name_{zero}")  # noqa: E702,E225 -- as printed


try:
    AsPrinted()
    facts["article's register_parameter call runs"] = True
except TypeError as err:
    print("the article's call raises TypeError:", err)
    facts["article's register_parameter call runs"] = False


# %%
# The corrected call
# ------------------
# ``register_parameter(name, param)`` needs the ``nn.Parameter`` (or ``None``) to register.
# ``setattr`` with an ``nn.Parameter`` does the same; ``nn.ParameterDict`` keeps a dynamic set
# of names together.
class Dynamic(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        for i in range(n):
            self.register_parameter(f"name_{i}", nn.Parameter(torch.zeros(4)))  # [4]


model = Dynamic().to(device)
print("model.name_0:", model.name_0)
print("named parameters:", [name for name, _ in model.named_parameters()])
facts["corrected call: model.name_0 is a registered Parameter"] = (
    isinstance(model.name_0, nn.Parameter)
    and "name_0" in dict(model.named_parameters()))


# %%
# The anti-pattern and the fix: a plain tensor attribute versus a buffer
# ----------------------------------------------------------------------
# ``scale`` is needed in ``forward`` but never trained: the case of the second bullet. The same
# tensor is kept three ways in one module: a plain attribute (the anti-pattern's
# class), a buffer and a non-persistent buffer (added by the recommended class, which
# inherits the plain attribute so that the check below compares all three side by side).
class PlainScale(nn.Module):  # anti-pattern
    def __init__(self):
        super().__init__()
        self.plain_scale = torch.full((4,), 2.0)  # [4], unknown to the module
        self.lin = nn.Linear(4, 4)

    def forward(self, x):  # x: [B, 4]
        return self.lin(x * self.plain_scale)


class Normaliser(PlainScale):  # recommended
    def __init__(self):
        super().__init__()
        # the same [4] tensor as a buffer saved and moved with the module, and as a
        # buffer moved but not saved
        self.register_buffer("scale", torch.full((4,), 2.0))
        self.register_buffer("cache", torch.zeros(4), persistent=False)

    def forward(self, x):  # x: [B, 4]
        return self.lin(x * self.scale)


# %%
# Check: what the module reaches of each
# --------------------------------------
# ``.to()`` is tried on ``meta`` (shapes without data), so that a tensor left behind shows
# on every machine, and on the GPU where there is one.
names = ("plain_scale", "scale", "cache")
net = Normaliser()
keys = list(net.state_dict())
params = [n for n, _ in net.named_parameters()]
print("state_dict keys:", keys, "| parameters:", params)
moved = {}
for target in ["meta"] + (["cuda"] if device.type == "cuda" else []):
    where = Normaliser().to(target)
    moved[target] = {n: getattr(where, n).device.type == target for n in names}
net.double()
dtypes = {n: getattr(net, n).dtype for n in names}
print(".double():", {n: str(d) for n, d in dtypes.items()})
for target, v in moved.items():
    print(f".to({target!r}):",
          {n: "moved" if m else "stayed behind" for n, m in v.items()})
for n in names:
    facts[f"{n}: in state_dict"] = n in keys
    facts[f"{n}: moved by .to()"] = all(v[n] for v in moved.values())
    facts[f"{n}: converted by .double()"] = dtypes[n] == torch.float64
facts["buffers among parameters()"] = bool({"scale", "cache"} & set(params))

# What the plain attribute costs after a round trip through a checkpoint:
net = Normaliser()
net.plain_scale.fill_(3.0)
net.scale.fill_(3.0)
restored = Normaliser()
restored.load_state_dict(net.state_dict())
print(f"after save/load: buffer scale {restored.scale[0].item()}, plain attribute "
      f"{restored.plain_scale[0].item()} (was set to 3.0)")
for n in ("plain_scale", "scale"):
    facts[f"{n}: change survives state_dict round trip"] = (
        getattr(restored, n)[0].item() == 3.0)

# %%
# Verdict
# -------
# The advice is right if the corrected ``register_parameter`` call registers the name, and
# the buffer gets what the plain attribute misses (saved, moved, converted) and stays out of
# the optimizer's reach. The snippet as printed is a fact shown above, not part of the verdict:
# it is a typo in the example, not in the advice.
RULE = ("wrong if the corrected register_parameter call fails, or a buffer is missed "
        "by state_dict, .to() or .double() or shows up in parameters(); holds if a "
        "buffer is saved, moved, converted and survives a state_dict round trip, its "
        "non-persistent form is moved but not saved, and the plain attribute is missed "
        "by state_dict, .to() and the round trip; depends otherwise")
buffer_ok = {"scale: in state_dict": True, "scale: moved by .to()": True,
             "scale: converted by .double()": True, "cache: moved by .to()": True,
             "cache: in state_dict": False, "buffers among parameters()": False,
             "scale: change survives state_dict round trip": True}
decision = decide(device,
                  [("wrong", {
                      "corrected call: model.name_0 is a registered Parameter": False}),
                   ("wrong", {"scale: in state_dict": False}),
                   ("wrong", {"scale: moved by .to()": False}),
                   ("wrong", {"scale: converted by .double()": False}),
                   ("wrong", {"buffers among parameters()": True}),
                   ("holds", {
                       **buffer_ok,
                       "plain_scale: in state_dict": False,
                       "plain_scale: moved by .to()": False,
                       "plain_scale: change survives state_dict round trip": False}),
                   ("depends", {})],
                  facts=facts)
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": [], "skipped": []}

# %%
# When not to use it
# ------------------
# Constants that never change and need no device (a Python float, a shape) can stay plain
# attributes. Use ``persistent=False`` for buffers that are cheap to recompute (masks,
# positional tables), so checkpoints stay small and loading older checkpoints does not fail on
# a missing key.

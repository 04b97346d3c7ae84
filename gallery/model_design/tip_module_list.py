"""
A list of parameters needs ``ParameterList``, not ``ModuleList(params)``
========================================================================

The README's last bullets (claim S2-6) say that ``module.float()`` / ``module.double()``
"will convert all model/submodule parameters and buffers", that a model should be linked
together from sub-modules, and, for parameters kept in a list:

    "Creating a list of parameters in model `__init__` definition? consider
    `torch.nn.ModuleList(params)` else individual parameters in the list will not be recognized
    as parameters."

``nn.Module`` finds sub-modules and parameters through attribute assignment, so a Python list
hides what it holds: the reason is right. This tip runs the advice exactly as written on a list
of parameters, then the container that holds parameters, and checks the other parts of the
bullets: what ``.double()`` converts and what a parent module reaches through its sub-modules.
"""
# sphinx_gallery_tips_claims = ["S2-6"]
# sphinx_gallery_tips_tags = ["module-design", "optimizer"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "nn.ModuleList(params) raises TypeError for Parameters: use nn.ParameterList (ModuleList for layers). A plain list hides both."
# sphinx_gallery_tips_keywords = ["ModuleList", "ParameterList", "nn.ModuleList", "nn.ParameterList", "parameters()", "double()", "float()", "Python list", "submodules"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.nn.ModuleList.html", "https://pytorch.org/docs/stable/generated/torch.nn.ParameterList.html"]
# sphinx_gallery_tips_related = ["tip_register_buffer_parameter", "tip_submodules"]
# sphinx_gallery_tips_rules = ["PTT008", "PTT009"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). This tip
# times nothing: its verdict rests on *facts*, what it observed on this device (an error
# raised, parameters found or not, dtypes and modes after a call). A verdict is the first case
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
# The anti-pattern: parameters in a plain list
# --------------------------------------------
# Three learned per-feature scales kept in a Python list.
class PlainList(nn.Module):
    def __init__(self):
        super().__init__()
        self.scales = [nn.Parameter(torch.ones(8)) for _ in range(3)]  # [8] each

    def forward(self, x):  # x: [B, 8]
        for s in self.scales:
            x = x * s
        return x


plain = PlainList().to(device)
found = len(list(plain.parameters()))
print(f"plain list: parameters() finds {found} of 3; "
      f"state_dict keys: {list(plain.state_dict())}")
print(f"plain list: .to({device.type!r}) leaves them on", plain.scales[0].device.type)
facts["plain list: Parameters found by parameters()"] = found > 0

# %%
# The article's fix, as written: ``torch.nn.ModuleList(params)``
# --------------------------------------------------------------
params = [nn.Parameter(torch.ones(8, device=device)) for _ in range(3)]  # [8] each
try:
    listed = nn.ModuleList(params)
except TypeError as err:
    print(f"torch.nn.ModuleList(params) raises TypeError: {err}")
    facts["torch.nn.ModuleList(params) runs"] = False
    facts["torch.nn.ModuleList(params) registers the Parameters"] = None
else:
    facts["torch.nn.ModuleList(params) runs"] = True
    facts["torch.nn.ModuleList(params) registers the Parameters"] = (
        len(list(listed.parameters())) == len(params))


# %%
# The fix: the container for parameters, ``nn.ParameterList``
# -----------------------------------------------------------
class WithParameterList(PlainList):
    def __init__(self):
        super().__init__()
        self.scales = nn.ParameterList(self.scales)  # the same Parameters, registered


fixed = WithParameterList().to(device)
print(f"nn.ParameterList: parameters() finds {len(list(fixed.parameters()))} of 3; "
      f"state_dict keys: {list(fixed.state_dict())}")

# %%
# Check: the two models compute the same thing; only one of them can learn
# ------------------------------------------------------------------------
# Same values in, same values out, where the plain list can run at all: its Parameters stayed
# on the CPU, so on a GPU its forward meets a CUDA input and raises. One SGD step on each: the
# optimizer sees nothing to train in the plain list (it refuses an empty parameter list).
x = torch.randn(4, 8, device=device)  # [B, 8]
try:
    torch.testing.assert_close(plain(x), fixed(x), rtol=0, atol=0)
    facts["plain list: forward runs on the model's device"] = True
except RuntimeError as err:
    reason = str(err).splitlines()[0][:48]
    print("plain list: forward on", device.type, "raises:", reason)
    facts["plain list: forward runs on the model's device"] = False
try:
    torch.optim.SGD(plain.parameters(), lr=0.1)
except ValueError as err:
    print("SGD over the plain-list model:", err)
opt = torch.optim.SGD(fixed.parameters(), lr=0.1)
fixed(x).square().mean().backward()
opt.step()
facts["nn.ParameterList: Parameters trained"] = not torch.equal(
    fixed.scales[0].detach(), torch.ones(8, device=device))

# %%
# The other bullets: ``.double()``, and modules linked together
# -------------------------------------------------------------
# A model composed of registered sub-modules, with BatchNorm buffers and dropout, next to
# the same layers kept in a plain list: does ``.double()`` convert every floating parameter and
# buffer, and do ``.eval()`` and ``.parameters()`` reach every sub-module?
def block():
    return nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.5))


class Composed(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(block() for _ in range(2))


class Hidden(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = [block() for _ in range(2)]  # anti-pattern: not registered


print(f"{'':9s} {'.double() converts':>19s} {'.eval() reaches':>16s} "
      f"{'.parameters() reaches':>22s}")
for cls in (Composed, Hidden):
    m = cls().to(device).double().eval()
    tensors = [t for b in m.blocks for t in list(b.parameters()) + list(b.buffers())
               if t.is_floating_point()]
    converted = all(t.dtype == torch.float64 for t in tensors)
    in_eval = not any(sub.training for b in m.blocks for sub in b.modules())
    owned = sum(len(list(b.parameters())) for b in m.blocks)
    reached = len(list(m.parameters())) == owned
    print(f"{cls.__name__:9s} {converted!s:>19s} {in_eval!s:>16s} {reached!s:>22s}")
    facts[f"{cls.__name__}: .double() converts every parameter and buffer"] = converted
    facts[f"{cls.__name__}: .eval() and .parameters() reach every sub-module"] = (
        in_eval and reached)

# %%
# Verdict
# -------
# The advice is tested as written: the container it names must accept the list. Its reason
# (a plain list is not recognised) and the other two bullets are checked alongside.
RULE = ("wrong if torch.nn.ModuleList(params) raises for a list of Parameters, or a "
        "plain list's Parameters are found anyway; holds if it registers them, "
        ".double() converts every parameter and buffer and a parent reaches its "
        "registered sub-modules; depends otherwise")
composed_ok = {"Composed: .double() converts every parameter and buffer": True,
               "Composed: .eval() and .parameters() reach every sub-module": True}
decision = decide(device,
                  [("wrong", {"torch.nn.ModuleList(params) runs": False}),
                   ("wrong", {"plain list: Parameters found by parameters()": True}),
                   ("holds", {
                       "torch.nn.ModuleList(params) registers the Parameters": True,
                       **composed_ok}),
                   ("depends", {})],
                  facts=facts,
                  key={"name": "Parameters in a plain list found by parameters()",
                       "value": found, "unit": "of 3"})
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": [], "skipped": []}

# %%
# When not to use it
# ------------------
# ``nn.ModuleList`` is the right container for a list of *layers*, ``nn.ParameterList`` for
# a list of Parameters; ``nn.ModuleDict`` / ``nn.ParameterDict`` for named ones. A plain list is
# right for things that must *not* be registered: references to modules owned elsewhere
# (registering them twice would save and move them twice).

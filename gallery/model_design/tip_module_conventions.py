"""
Keep ``no_grad``, ``eval()`` and devices out of the model
=========================================================

One README gathers several rules about what a model definition should not decide for its
user (claims S2-5 and S2-2):

    "Let `.train()` and `.eval()` to be set outside the model defition or set by user."

    "`torch.no_grad()` should not be used within the model. **Reason:** Sometimes user may want
    to backprop through that chunk of code."

    "`.cuda()` and `.cpu()` are discouraged, use `.to(device)` instead. **Reason:** `.to(device)`
    is more dynamic and scalable."

Each rule is tested the same way: a model that breaks it and a model that follows it, used
the way a caller uses a model (train it, switch it to training mode, put it on a device), and
what the caller gets from each.
"""
# sphinx_gallery_tips_claims = ["S2-5", "S2-2"]
# sphinx_gallery_tips_tags = ["module-design", "device", "autograd"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "no_grad in forward blocks fine-tuning, eval() in forward disables dropout in training; .cuda()/.cpu() in forward ignore model.to(device)."
# sphinx_gallery_tips_keywords = ["no_grad", "eval", "train", ".to(device)", ".cuda()", ".cpu()", "device-agnostic", "dropout", "meta device"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/notes/cuda.html#device-agnostic-code"]
# sphinx_gallery_tips_related = ["tip_tensors_in_forward", "tip_register_buffer_parameter"]
# sphinx_gallery_tips_rules = ["PTT015", "PTT016", "PTT017", "PTT018"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). This tip
# times nothing: its verdict rests on *facts*, what it observed on this device (a gradient
# present or not, dropout active or not, where a model's output lands). A verdict is the first
# case of the rule whose conditions the facts meet.
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
x = torch.randn(8, 16, device=device)  # [B, 16]


# %%
# The anti-pattern and the fix, rule 1: no ``torch.no_grad()`` inside ``forward``
# -------------------------------------------------------------------------------
# The author thought of the encoder as frozen and wrapped it in ``no_grad``. A user who wants
# to fine-tune it cannot: its weights get no gradient.
class FrozenInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.head = nn.Linear(16, 16), nn.Linear(16, 1)

    def forward(self, x):  # x: [B, 16]
        with torch.no_grad():  # anti-pattern: decides for every user
            h = self.encoder(x)  # [B, 16]
        return self.head(h)  # [B, 1]


class Plain(FrozenInside):
    def forward(self, x):  # x: [B, 16]
        return self.head(self.encoder(x))  # [B, 1]


for cls in (FrozenInside, Plain):
    m = cls().to(device)
    m(x).sum().backward()
    has_grad = m.encoder.weight.grad is not None
    print(f"{cls.__name__:12s}: encoder gets a gradient: {has_grad}")
    facts[f"{cls.__name__}: encoder gets a gradient"] = has_grad

# Freezing stays possible from the outside, per user, without changing the class:
m = Plain().to(device)
m.encoder.requires_grad_(False)
m(x).sum().backward()
print("Plain, frozen by its caller with encoder.requires_grad_(False):")
print("  encoder grad:", m.encoder.weight.grad, "| head gets a gradient:",
      m.head.weight.grad is not None)


# %%
# The anti-pattern and the fix, rule 2: the caller sets ``.train()`` / ``.eval()``
# --------------------------------------------------------------------------------
# This model switches itself to eval mode in ``forward`` (say, to get deterministic outputs).
# A caller who asks for training mode silently trains without dropout.
class EvalInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.drop = nn.Linear(16, 16), nn.Dropout(0.5)

    def forward(self, x):  # x: [B, 16]
        self.eval()  # anti-pattern
        return self.drop(self.lin(x))  # [B, 16]


class DropoutNet(EvalInside):
    def forward(self, x):  # x: [B, 16]
        return self.drop(self.lin(x))


for cls in (EvalInside, DropoutNet):
    m = cls().to(device).train()  # the caller asks for training mode
    a, b = m(x), m(x)
    active = not torch.equal(a, b)  # dropout draws a new mask per call
    print(f"{cls.__name__:11s}: dropout active after .train(): {active!s:5s} "
          f"| zeroed share {(a == 0).float().mean().item():.2f}")
    facts[f"{cls.__name__}: dropout active after .train()"] = active


# %%
# The anti-pattern and the fix, rule 3: ``.to(device)``, not ``.cuda()`` / ``.cpu()``
# -----------------------------------------------------------------------------------
# Two models that hard-code a device inside ``forward``: one makes its mask with ``.cuda()``,
# the other hands its output back with ``.cpu()`` (say, for NumPy). The third keeps the mask as
# a buffer, which ``model.to(device)`` moves with the weights. The caller puts each model on
# every device this machine offers, including ``meta`` (shapes without data, used to plan
# large models), and checks that it runs and answers on that device.
class HardCuda(nn.Module):  # anti-pattern
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):  # x: [B, 16]
        mask = torch.ones(16).cuda()  # anti-pattern: [16], on the GPU wherever we are
        return self.lin(x) * mask


class HardCpu(HardCuda):  # anti-pattern
    def forward(self, x):  # x: [B, 16]
        return self.lin(x).cpu()  # anti-pattern: [B, 16], on the CPU wherever we are


class ToDevice(HardCuda):  # recommended
    def __init__(self):
        super().__init__()
        # [16], moved by model.to(device) with the weights
        self.register_buffer("mask", torch.ones(16), persistent=False)

    def forward(self, x):  # x: [B, 16]
        return self.lin(x) * self.mask


targets = ["cpu", "meta"] + (["cuda"] if torch.cuda.is_available() else [])
print(f"{'model.to(d)':12s}" + "".join(f"{t:>22s}" for t in targets))
for cls in (HardCuda, HardCpu, ToDevice):
    follows, cells = True, []
    for target in targets:
        try:
            out = cls().to(target)(torch.randn(8, 16).to(target))
        except (AssertionError, RuntimeError, NotImplementedError) as err:
            follows = False
            cells.append(type(err).__name__)
            continue
        follows = follows and out.device.type == target
        where = out.device.type
        cells.append("runs" if where == target else f"answers on {where}")
    print(f"{cls.__name__:12s}" + "".join(f"{c:>22s}" for c in cells))
    facts[f"{cls.__name__}: runs and answers on every device"] = follows

# %%
# Verdict
# -------
# A rule holds when breaking it costs the caller something the conforming model does not:
# a gradient, dropout, or a device.
RULE = ("holds if no_grad in forward blocks the encoder's gradient, eval() in forward "
        "turns dropout off after .train(), and the .cuda() and .cpu() models each fail "
        "on some device where the .to(device) model runs, while the conforming models "
        "do neither; wrong if no anti-pattern costs anything; depends otherwise")
decision = decide(
    device,
    [("holds", {"FrozenInside: encoder gets a gradient": False,
                "Plain: encoder gets a gradient": True,
                "EvalInside: dropout active after .train()": False,
                "DropoutNet: dropout active after .train()": True,
                "HardCuda: runs and answers on every device": False,
                "HardCpu: runs and answers on every device": False,
                "ToDevice: runs and answers on every device": True}),
     ("wrong", {"FrozenInside: encoder gets a gradient": True,
                "EvalInside: dropout active after .train()": True,
                "HardCuda: runs and answers on every device": True,
                "HardCpu: runs and answers on every device": True}),
     ("depends", {})],
    facts=facts)
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": [], "skipped": []}

# %%
# When not to use it
# ------------------
# A model may legitimately decide for one buffer update, e.g. an EMA teacher updated under
# ``torch.no_grad()`` in a method that is not ``forward``. Keep such code in clearly named
# methods, and leave ``forward``'s gradient mode, train/eval mode and device to the caller. In
# scripts (not in models), ``x.cuda()`` and ``x.to("cuda")`` do the same thing; the rule is
# about code that must run wherever its caller puts it.

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

Each rule is tested the same way: a model that breaks it, a model that follows it, and an
assertion on what the user of the first one loses.
"""
# sphinx_gallery_tips_claims = ["S2-5", "S2-2"]
# sphinx_gallery_tips_tags = ["module-design", "device", "autograd"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "1.0"
# sphinx_gallery_tips_takeaway = "no_grad inside forward blocks fine-tuning, eval() inside forward disables dropout in training, hard-coded .cuda()/.cpu() fails on some machine."
# sphinx_gallery_tips_keywords = ["no_grad", "eval", "train", ".to(device)", ".cuda()", ".cpu()", "device-agnostic", "dropout"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/notes/cuda.html#device-agnostic-code"]

# %%
# Setup
# -----
import torch
from torch import nn

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, torch {torch.__version__}")
checks = {}
x = torch.randn(8, 16, device=device)  # [B, 16]


# %%
# Rule 1: no ``torch.no_grad()`` inside ``forward``
# -------------------------------------------------
# The author thought of the encoder as frozen and wrapped it in ``no_grad``. A user who wants
# to fine-tune it cannot: its weights get no gradient, with no error or warning.
class FrozenInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.head = nn.Linear(16, 16), nn.Linear(16, 1)

    def forward(self, x):  # x: [B, 16]
        with torch.no_grad():  # anti-pattern: decides for every user
            h = self.encoder(x)  # [B, 16]
        return self.head(h)  # [B, 1]


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.head = nn.Linear(16, 16), nn.Linear(16, 1)

    def forward(self, x):  # x: [B, 16]
        return self.head(self.encoder(x))  # [B, 1]


for cls in (FrozenInside, Plain):
    m = cls().to(device)
    m(x).sum().backward()
    print(f"{cls.__name__:12s}: encoder.weight.grad is {'None' if m.encoder.weight.grad is None else 'set'}")
    if cls is FrozenInside:
        blocked = m.encoder.weight.grad is None and m.head.weight.grad is not None
    else:
        flows = m.encoder.weight.grad is not None
checks["no_grad inside forward silently blocks the encoder's gradient"] = blocked and flows

# Freezing stays possible from the outside, per user, without changing the class:
m = Plain().to(device)
m.encoder.requires_grad_(False)
m(x).sum().backward()
print("Plain with encoder.requires_grad_(False): encoder grad", m.encoder.weight.grad, "| head grad set:",
      m.head.weight.grad is not None)


# %%
# Rule 2: no ``self.eval()`` / ``self.train()`` inside the model
# --------------------------------------------------------------
# This model switches itself to eval mode in ``forward`` (say, to get deterministic outputs).
# Training it afterwards silently trains without dropout.
class EvalInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.drop = nn.Linear(16, 16), nn.Dropout(0.5)

    def forward(self, x):  # x: [B, 16]
        self.eval()  # anti-pattern
        return self.drop(self.lin(x))  # [B, 16]


class DropoutNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.drop = nn.Linear(16, 16), nn.Dropout(0.5)

    def forward(self, x):  # x: [B, 16]
        return self.drop(self.lin(x))


results = {}
for cls in (EvalInside, DropoutNet):
    m = cls().to(device).train()  # the user asks for training mode
    a, b = m(x), m(x)
    results[cls.__name__] = (torch.equal(a, b), m.training, (a == 0).float().mean().item())
    print(f"{cls.__name__:11s}: two train-mode calls equal: {results[cls.__name__][0]}, "
          f"training flag after: {m.training}, zeroed fraction: {results[cls.__name__][2]:.2f}")
checks["eval() inside forward turns dropout off in training"] = (
    results["EvalInside"][0] and not results["EvalInside"][1] and not results["DropoutNet"][0])


# %%
# Rule 3: ``.to(device)`` rather than ``.cuda()`` / ``.cpu()``
# ------------------------------------------------------------
# Two models that hard-code a device: one makes its mask with ``.cuda()``, the other pulls its
# input to ``.cpu()``. Whichever machine runs this, one of them fails. The fix creates tensors
# on the input's device and leaves the model's device to the caller's ``.to(device)``.
class HardCuda(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):  # x: [B, 16]
        mask = torch.ones(16).cuda()  # anti-pattern
        return self.lin(x) * mask


class HardCpu(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):  # x: [B, 16]
        return self.lin(x.cpu())  # anti-pattern: wrong as soon as the weights live elsewhere


class Agnostic(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.register_buffer("mask", torch.ones(16), persistent=False)  # [16]: follows .to()

    def forward(self, x):  # x: [B, 16]
        return self.lin(x) * self.mask


failures = {}
for cls in (HardCuda, HardCpu, Agnostic):
    try:
        out = cls().to(device)(x)
        failures[cls.__name__] = None
        print(f"{cls.__name__:9s} on {device.type}: ok, output on {out.device.type}")
    except (RuntimeError, AssertionError) as err:
        failures[cls.__name__] = f"{type(err).__name__}: {str(err).splitlines()[0]}"
        print(f"{cls.__name__:9s} on {device.type}: {failures[cls.__name__]}")
checks["a hard-coded .cuda()/.cpu() model fails on this machine"] = (
    failures["HardCuda"] is not None or failures["HardCpu"] is not None)
checks["the .to(device) model runs"] = failures["Agnostic"] is None

# %%
# Verdict
# -------
for name, ok in checks.items():
    print(f"  {'yes' if ok else 'NO '}  {name}")
RULE = ("holds if all 4 checks confirm the rules' reasons: no_grad in forward blocks gradients, "
        "eval() in forward disables dropout during training, a hard-coded .cuda()/.cpu() model "
        "fails on this machine while the .to(device) one runs; depends if some do; wrong if none do")
passed = sum(checks.values())
verdict = "holds" if passed == len(checks) else ("wrong" if passed == 0 else "depends")
print(f"Verdict: {verdict}. {passed}/{len(checks)} checks confirm.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": "checks confirming the rules", "value": float(passed), "unit": f"of {len(checks)}"},
    "measurements": [
        {"variant": name, "metric": "zeroed fraction in train mode", "value": r[2], "unit": ""}
        for name, r in results.items()
    ],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# A model may legitimately decide for one buffer update, e.g. an EMA teacher updated under
# ``torch.no_grad()`` in a method that is not ``forward``. Keep such code in clearly named
# methods, and leave ``forward``'s gradient mode, train/eval mode and device to the caller.

"""
float16 needs a GradScaler, bfloat16 does not
=============================================

Mixed-precision training in float16 pairs ``torch.autocast`` with ``torch.amp.GradScaler``. The
``torch.amp`` documentation gives the reason in its "Gradient Scaling" section (claim S6-23):

    "Gradient values with small magnitudes may not be representable in float16. These values
    will flush to zero ("underflow"), so the update for the corresponding parameters will be
    lost."

The scaler multiplies the loss before ``backward()`` so the gradients stay above float16's
smallest value, and divides them again before the optimizer step. bfloat16 keeps float32's
8-bit exponent (its smallest normal value is float32's, about 1e-38, against about 6e-5 for
float16, whose subnormal values reach down to about 6e-8; below that a value rounds to zero),
so the same documentation's CPU example trains in bfloat16 with autocast alone. This
tip makes the gradients small, from ordinary to tiny, and counts the first layer's weight
gradients that come out exactly zero where float32 gives a value: float16 without a scaler,
float16 with one, and bfloat16 without one. Autocast supports both types on the CPU and on
CUDA, so the tip runs the same code on either.
"""
# sphinx_gallery_tips_claims = ["S6-23"]
# sphinx_gallery_tips_tags = ["mixed-precision", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_rules = ["PTT038"]
# sphinx_gallery_tips_min_torch = "2.3"
# sphinx_gallery_tips_takeaway = "float16 autocast without GradScaler flushes small gradients to zero (updates lost); the scaler prevents it. bfloat16 keeps them without a scaler."
# sphinx_gallery_tips_keywords = ["GradScaler", "bfloat16", "bf16", "float16", "fp16", "gradient underflow", "underflow", "gradient scaling", "loss scaling", "autocast", "mixed precision training", "zero gradients", "torch.amp"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/amp.html", "https://docs.pytorch.org/docs/stable/notes/amp_examples.html"]
# sphinx_gallery_tips_related = ["tip_mixed_precision", "tip_bf16_autocast_cpu"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). Facts
# are what the tip observed on this device: the share of gradient entries each variant lost. A
# verdict is the first case of the rule whose conditions the facts meet.
from tipsite.tipkit import decide, plot_series, report


# %%
# Setup
# -----
# A three-layer MLP and one batch. ``loss_weight`` multiplies the loss, and with it every
# gradient: it stands in for what makes real gradients small (a loss averaged over many
# elements, a small auxiliary-loss weight, a deep network, late training).
import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")
width = {"cpu": 256, "cuda": 1024}[device.type]
model = nn.Sequential(nn.Linear(width, width), nn.ReLU(),
                      nn.Linear(width, width), nn.ReLU(),
                      nn.Linear(width, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, width, device=device)  # [batch, width]
y = torch.randn(64, 1, device=device)      # [batch, 1]


# %%
# The anti-pattern and the recommended patterns
# ---------------------------------------------
# Each function runs one forward and backward and returns the first layer's weight gradient,
# as the optimizer would see it. The anti-pattern is float16 autocast with a plain
# ``backward()``; the fixes are float16 with ``GradScaler`` (``unscale_`` divides the gradients
# back, as ``scaler.step`` does before stepping), and bfloat16 with a plain ``backward()``.
def grad_float32(loss_weight):
    model.zero_grad(set_to_none=True)
    (nn.functional.mse_loss(model(x), y) * loss_weight).backward()
    return model[0].weight.grad.clone()


def grad_float16(loss_weight):  # anti-pattern: float16 without a scaler
    model.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=torch.float16):
        loss = nn.functional.mse_loss(model(x), y) * loss_weight
    loss.backward()
    return model[0].weight.grad.clone()


def grad_float16_scaled(loss_weight):  # recommended for float16
    model.zero_grad(set_to_none=True)
    scaler = torch.amp.GradScaler(device.type)
    with torch.autocast(device.type, dtype=torch.float16):
        loss = nn.functional.mse_loss(model(x), y) * loss_weight
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    return model[0].weight.grad.clone()


def grad_bfloat16(loss_weight):  # recommended: bfloat16, no scaler
    model.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        loss = nn.functional.mse_loss(model(x), y) * loss_weight
    loss.backward()
    return model[0].weight.grad.clone()


# %%
# Check: at an ordinary gradient size all three agree with float32
# ----------------------------------------------------------------
# To the precision of the low type (bfloat16 keeps 8 significant bits, float16 11), measured
# as the relative error of the whole gradient.
ref = grad_float32(1.0)
variants = {"float16, no scaler": grad_float16,
            "float16 + GradScaler": grad_float16_scaled,
            "bfloat16, no scaler": grad_bfloat16}
for name, fn in variants.items():
    err = ((fn(1.0) - ref).norm() / ref.norm()).item()
    print(f"{name:22s} relative error against float32 at loss weight 1: {err:.3f}")
    assert err < 0.1, name

# %%
# Measurement: gradients lost as they get smaller
# -----------------------------------------------
# A gradient entry is *lost* when it is exactly zero while float32 gives it a value: that
# parameter gets no update from this step.
loss_weights = [1.0, 1e-2, 1e-4, 1e-5, 1e-6]
sizes, lost = [], {name: [] for name in variants}
for w in loss_weights:
    ref = grad_float32(w)
    sizes.append(ref.abs().median().item())
    for name, fn in variants.items():
        g = fn(w)
        lost[name].append(((g == 0) & (ref != 0)).float().mean().item())
print(f"{'loss weight':>11s} {'median |grad|':>13s}  " + "  ".join(f"{n:>20s}"
                                                        for n in variants))
for i, w in enumerate(loss_weights):
    print(f"{w:11.0e} {sizes[i]:13.2e}  "
          + "  ".join(f"{lost[n][i]:19.1%} " for n in variants))

# %%
# Where updates are lost
# ----------------------
fig = plot_series({name: (sizes, [100 * v for v in values])
                   for name, values in lost.items()},
                  xlabel="median |gradient| in float32 (log scale)",
                  ylabel="weight gradients lost (%)",
                  title=f"First layer's weight gradient, 3-layer MLP, width {width}",
                  device=device, logx=True)
fig.axes[0].invert_xaxis()

# %%
# Verdict
# -------
# The documentation's claim holds if float16 without a scaler loses most of the gradients
# (over half) at the smallest size, while the scaler keeps them (at most 1% lost at every size)
# and bfloat16 keeps them without a scaler. If float16 loses none even at the smallest size, the
# claim is wrong here; anything else depends.
facts = {
    "float16, no scaler: over half lost at the smallest size": lost[
        "float16, no scaler"][-1] > 0.5,
    "float16 + GradScaler: at most 1% lost at every size": max(
        lost["float16 + GradScaler"]) <= 0.01,
    "bfloat16, no scaler: at most 1% lost at every size": max(
        lost["bfloat16, no scaler"]) <= 0.01,
    "float16, no scaler: none lost at any size": max(lost["float16, no scaler"]) == 0,
}
RULE = ("holds if float16 autocast without GradScaler loses over half of the weight "
        "gradients at the smallest gradient size while float16 with GradScaler and "
        "bfloat16 without one lose at most 1% at every size; wrong if float16 "
        "without a scaler loses none at any size; depends otherwise")
decision = decide(device, [
    ("holds", {"float16, no scaler: over half lost at the smallest size": True,
               "float16 + GradScaler: at most 1% lost at every size": True,
               "bfloat16, no scaler: at most 1% lost at every size": True}),
    ("wrong", {"float16, no scaler: none lost at any size": True}),
    ("depends", {}),
], facts=facts, key={"name": f"float16 without GradScaler: gradients lost at median "
                             f"|grad| {sizes[-1]:.1e}",
                     "value": 100 * lost["float16, no scaler"][-1], "unit": "%"})
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# Where the hardware computes bfloat16 natively (NVIDIA Ampere and newer, recent Intel and Arm
# CPUs), train in bfloat16 autocast and drop the scaler. Keep float16 with ``GradScaler`` where
# bfloat16 is missing or slow (older GPUs, e.g. V100 and T4); the scaler adds a few small
# kernels per step and, in ``scaler.step``, one wait for the GPU (it reads whether any
# gradient overflowed, to skip that step). bfloat16 has fewer significant bits than float16
# (8 against 11): it keeps small gradients, but rounds every value more coarsely, which some
# models notice. For the speed side of autocast, see the related tips.

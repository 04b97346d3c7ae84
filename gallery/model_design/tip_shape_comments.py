"""
Comment, and check, the shape of every transformation
=====================================================

The article asks for the expected shape beside each transformation, because shapes drift as
models grow deeper (claim S0-3):

    "As the depth of the model increases, we often misidentify the shape of each block's input
    and output tensors. So, it's good to comment on the preferred shape beside the
    transformations."

The worst shape mistakes raise no error at all: broadcasting turns them into a different, but
valid, computation. This tip trains a regression whose hand-written loss compares a ``[B, 1]``
prediction with a ``[B]`` target. The loss runs, decreases, and is wrong. Then it shows that
a shape comment names the mistake and a one-line shape assertion stops it.
"""
# sphinx_gallery_tips_claims = ["S0-3"]
# sphinx_gallery_tips_tags = ["training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "1.0"
# sphinx_gallery_tips_takeaway = "A [B,1] vs [B] loss broadcasts to [B,B] and trains silently to the wrong answer; a shape comment plus assert catches it."
# sphinx_gallery_tips_keywords = ["shape", "broadcasting", "assert", "mse_loss", "unsqueeze", "squeeze", "silent bug"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/notes/broadcasting.html"]

# %%
# Setup
# -----
# A linear regression with a known answer: y = X @ w_true + noise.
import warnings

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)  # small tensors: on a shared machine extra threads only wait on each other
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")

N, F = 256, 8
X = torch.randn(N, F, device=device)  # [N, F]
w_true = torch.randn(F, device=device)  # [F]
y = X @ w_true + 0.1 * torch.randn(N, device=device)  # [N]: one target per row, no trailing dim


# %%
# The anti-pattern: no shapes written down
# ----------------------------------------
# ``nn.Linear(F, 1)`` returns ``[B, 1]``; the targets are ``[B]``. Subtracting them broadcasts
# to ``[B, B]``: every prediction is compared with every target.
def loss_unchecked(pred, target):
    return ((pred - target) ** 2).mean()


# %%
# The recommended pattern: shapes in comments, and asserted where they meet
# -------------------------------------------------------------------------
def loss_checked(pred, target):
    # pred: [B, 1] from nn.Linear(F, 1); target: [B]
    pred = pred.squeeze(-1)  # [B]
    assert pred.shape == target.shape, f"pred {tuple(pred.shape)} vs target {tuple(target.shape)}"
    return ((pred - target) ** 2).mean()  # scalar


# %%
# Check: the broken loss runs, and its number looks plausible
# -----------------------------------------------------------
model = nn.Linear(F, 1).to(device)
pred = model(X)  # [N, 1]
diff = pred - y
print("pred", tuple(pred.shape), "- target", tuple(y.shape), "->", tuple(diff.shape), "(silently)")
bad, good = loss_unchecked(pred, y).item(), loss_checked(pred, y).item()
print(f"loss at init: unchecked {bad:.4f}, checked {good:.4f}  ({abs(bad - good) / good:.1%} apart)")
assert diff.shape == (N, N)

# The assertion in the fixed loss catches the mistake the moment the shapes disagree:
try:
    pred_wrong = model(X).squeeze(-1).unsqueeze(0)  # a [1, B] typo, e.g. squeezing the wrong dim
    loss_checked(pred_wrong, y)
except AssertionError as err:
    caught = str(err)
    print("shape assertion caught:", caught)
else:
    caught = ""

# The built-in loss warns about this exact case; a hand-written loss does not.
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    nn.functional.mse_loss(pred, y)
    loss_unchecked(pred, y)
builtin_warns = [str(w.message)[:60] + "..." for w in seen]
print("warnings raised (mse_loss, then hand-written):", builtin_warns or "none")


# %%
# Measurement: train with each loss
# ---------------------------------
# Same seed, same optimiser, 60 full-batch steps. What matters is the true error of the
# trained model, measured the same way for both.
def train(loss_fn, steps=60):
    torch.manual_seed(1)
    m = nn.Linear(F, 1).to(device)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss_fn(m(X), y).backward()
        opt.step()
    with torch.no_grad():
        true_mse = ((m(X).squeeze(-1) - y) ** 2).mean().item()  # [N] vs [N]
        weight_err = (m.weight.squeeze(0) - w_true).norm().item()
    return true_mse, weight_err


mse_bad, werr_bad = train(loss_unchecked)
mse_good, werr_good = train(loss_checked)
print(f"true MSE after training: unchecked loss {mse_bad:.4f}, checked loss {mse_good:.4f}"
      f"  ({mse_bad / mse_good:.0f}x worse)")
print(f"|w - w_true|:            unchecked loss {werr_bad:.4f}, checked loss {werr_good:.4f}")

# %%
# Verdict
# -------
# The claim's reason is that shape mistakes go unnoticed. Four checks test that reason: the
# mis-shaped loss raises nothing, its value at initialisation looks plausible (within 25% of
# the right one, so reading the number reveals nothing), training on it ends far from the
# answer (true MSE at least 10x worse), and a shape assertion beside the shape comment
# catches a mis-shaped input.
RULE = ("holds if all 4 checks confirm it: the [B,1] vs [B] loss runs without error, looks "
        "plausible at init (within 25% of the correct loss), leaves a true MSE at least 10x the "
        "correct training's, and the shape assertion raises; depends if only some do; wrong if none do")
checks = {
    "mis-shaped loss runs without error": True,  # reaching this line proves it
    "mis-shaped loss looks plausible at init": abs(bad - good) / good < 0.25,
    "training on it ends >=10x worse": mse_bad >= 10 * mse_good,
    "shape assertion catches the mistake": "pred" in caught,
}
for name, ok in checks.items():
    print(f"  {'yes' if ok else 'NO '}  {name}")
passed = sum(checks.values())
verdict = "holds" if passed == len(checks) else ("wrong" if passed == 0 else "depends")
print(f"Verdict: {verdict}. {passed}/{len(checks)} checks confirm the claim's reason.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": "true MSE, unchecked / checked loss", "value": mse_bad / mse_good, "unit": "x"},
    "measurements": [
        {"variant": "unchecked loss [B,1] vs [B]", "metric": "loss at init", "value": bad, "unit": ""},
        {"variant": "checked loss", "metric": "loss at init", "value": good, "unit": ""},
        {"variant": "unchecked loss [B,1] vs [B]", "metric": "true MSE after 60 steps",
         "value": mse_bad, "unit": ""},
        {"variant": "checked loss", "metric": "true MSE after 60 steps", "value": mse_good, "unit": ""},
    ],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# Comments cannot fail; a shape comment that went stale misleads. Put ``assert`` (or
# ``torch._assert`` inside code you trace or compile) where two tensors meet, and keep the
# comments for what the assertion cannot say, such as which axis is time. Assertions cost a
# Python comparison per call and can be disabled with ``python -O``.

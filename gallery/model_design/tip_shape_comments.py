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
# sphinx_gallery_tips_min_torch = "1.7"
# sphinx_gallery_tips_takeaway = "A [B,1] vs [B] loss broadcasts to [B,B] and trains silently to the wrong answer; a shape comment plus assert catches it."
# sphinx_gallery_tips_keywords = ["shape", "broadcasting", "assert", "mse_loss", "unsqueeze", "squeeze", "silent bug"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/notes/broadcasting.html"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). Facts are
# what the tip observed on this device (an error or warning raised or not). The two losses are
# compared by the true error each training run ends with: one ratio per random seed, whose
# ~95% confidence interval is compared with the rule's threshold. A verdict is the first case
# of the rule whose conditions the measurements meet.
from tipsite.tipkit import compare_values, decide, report


# %%
# Setup
# -----
# A linear regression with a known answer: y = X @ w_true + noise, one problem per seed.
import warnings

import torch
from torch import nn

torch.set_num_threads(1)  # tiny tensors: extra threads only wait on each other
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

N, F = 256, 8


def problem(seed):
    torch.manual_seed(seed)
    X = torch.randn(N, F, device=device)  # [N, F]
    w_true = torch.randn(F, device=device)  # [F]
    y = X @ w_true + 0.1 * torch.randn(N, device=device)  # [N]: no trailing dim
    return X, y


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
    assert pred.shape == target.shape, f"{tuple(pred.shape)} vs {tuple(target.shape)}"
    return ((pred - target) ** 2).mean()  # scalar


# %%
# Check: does the mis-shaped loss say anything?
# ---------------------------------------------
# Run it and record any error or warning; compare its value at initialisation with the right
# loss; and see what the built-in ``mse_loss`` does with the same shapes.
X, y = problem(0)
model = nn.Linear(F, 1).to(device)
pred = model(X)  # [N, 1]
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    try:
        bad = loss_unchecked(pred, y).item()
        raised = False
    except RuntimeError as err:
        print("the mis-shaped loss raises:", err)
        raised = True
hand_warnings = len(seen)
good = loss_checked(pred, y).item()
print("pred", tuple(pred.shape), "- target", tuple(y.shape), "->",
      tuple((pred - y).shape))
if not raised:
    print(f"loss at init: unchecked {bad:.4f}, checked {good:.4f} "
          f"({abs(bad - good) / good:.1%} apart), warnings: {hand_warnings}")

with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    nn.functional.mse_loss(pred, y)
print("built-in mse_loss on the same shapes warns:",
      [str(w.message)[:50] + "..." for w in seen])

# The assertion in the checked loss stops a mis-shaped input where it happens:
try:
    loss_checked(model(X).squeeze(-1).unsqueeze(0), y)  # a [1, B] typo
except AssertionError as err:
    print("shape assertion caught:", err)


# And the mistake of this tip: the checked loss with its squeeze forgotten, so that the
# [B, 1] prediction and the [B] target reach the assertion as they are.
def loss_squeeze_forgotten(pred, target):
    # pred: [B, 1] from nn.Linear(F, 1); target: [B]
    assert pred.shape == target.shape, f"{tuple(pred.shape)} vs {tuple(target.shape)}"
    return ((pred - target) ** 2).mean()  # scalar


try:
    loss_squeeze_forgotten(pred, y)  # [N, 1] vs [N]
    assertion_raises = False
except AssertionError as err:
    assertion_raises = True
    print("shape assertion caught [B, 1] vs [B]:", err)

# %%
# Measurement: train with each loss
# ---------------------------------
# Same seed, same optimiser, 60 full-batch steps; then the true error of the trained model,
# measured the same way for both. Five seeds, five problems: one ratio each.
def train(loss_fn, X, y, steps=60):
    torch.manual_seed(1)
    m = nn.Linear(F, 1).to(device)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss_fn(m(X), y).backward()
        opt.step()
    with torch.no_grad():
        return ((m(X).squeeze(-1) - y) ** 2).mean().item()  # [N] vs [N]


mse_bad, mse_good = [], []
for seed in range(5):
    X, y = problem(seed)
    mse_bad.append(train(loss_unchecked, X, y))
    mse_good.append(train(loss_checked, X, y))
    print(f"seed {seed}: true MSE after training, unchecked {mse_bad[-1]:.4f}, "
          f"checked {mse_good[-1]:.4f}")
trained = compare_values("true MSE after training, unchecked / checked loss",
                         {"unchecked loss": mse_bad, "checked loss": mse_good},
                         threshold=10.0, device=device, metric="true MSE", unit="")

# %%
# Verdict
# -------
# The claim's reason is that shape mistakes go unnoticed, and its remedy is writing shapes
# down where they meet. It holds if the mis-shaped loss raises nothing, warns nothing, looks
# plausible at initialisation (within 25% of the right loss, so reading the number reveals
# nothing), still ends training far from the answer (true MSE at least 10x worse for every
# seed's interval), and the shape assertion raises on the same [B, 1] vs [B] inputs.
RULE = ("holds if the [B,1] vs [B] loss raises no error or warning, starts within 25% "
        "of the right loss, trains to a true MSE >10x the right one's (interval above "
        "10), and the shape assertion raises on [B,1] vs [B]; wrong if the loss "
        "raises; depends otherwise")
facts = {"mis-shaped loss raises an error": raised,
         "mis-shaped loss: warnings": hand_warnings,
         "mis-shaped loss within 25% of the right one at init": (
             not raised and abs(bad - good) / good < 0.25),
         "shape assertion raises": assertion_raises}
decision = decide(device,
                  [("wrong", {"mis-shaped loss raises an error": True}),
                   ("holds", {
                       "mis-shaped loss: warnings": 0,
                       "mis-shaped loss within 25% of the right one at init": True,
                       "shape assertion raises": True,
                       "training": "all above"}),
                   ("depends", {})],
                  groups={"training": [trained]}, facts=facts, key=trained)
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": [], "skipped": []}

# %%
# When not to use it
# ------------------
# Comments cannot fail; a shape comment that went stale misleads. Put ``assert`` (or
# ``torch._assert`` inside code you trace or compile) where two tensors meet, and keep the
# comments for what the assertion cannot say, such as which axis is time. An assertion costs a
# Python comparison per call and is skipped under ``python -O``.

"""
``torch.backends.cudnn.benchmark``: fixed versus changing input sizes
=====================================================================

The article recommends ``torch.backends.cudnn.benchmark = True`` for training and adds a caveat
(claim S1-10):

    "WARNING: it's recommended when the input size doesn't change often, otherwise might hurt the
    performance."

With the flag on, the first convolution of every new input shape makes cuDNN try several
algorithms (forward and both backward convolutions) and cache the fastest for that shape. That
costs time once per shape and can pay off on every later step with the same shape. PyTorch keeps
one cache of chosen algorithms per shape for both settings: whichever setting meets a shape first
picks its algorithm, and the other reuses it. So this tip gives each setting shapes of its own,
with the same number of pixels. The flag only steers cuDNN, so the claim is about CUDA: CPU
convolutions never read it, and a CPU build of this tip measures nothing. On CUDA it times full
training steps (forward, backward, optimizer step) of a small conv net with the flag off and on:
with a fixed input shape across image sizes, and with a new input shape every few steps.
"""
# sphinx_gallery_tips_claims = ["S1-10"]
# sphinx_gallery_tips_tags = ["cuda", "training"]
# sphinx_gallery_tips_devices = ["cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.0"
# sphinx_gallery_tips_takeaway = "cudnn.benchmark autotunes once per input shape: see the figures for what it gains on fixed shapes and costs when shapes keep changing."
# sphinx_gallery_tips_keywords = ["cudnn.benchmark", "cudnn", "torch.backends.cudnn.benchmark", "autotune", "convolution speed", "dynamic shapes"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/backends.html#torch.backends.cudnn.benchmark"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, anti-pattern time / recommended time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import compare_times, decide, plot_ratios, report


# %%
# Setup
# -----
# Three 3x3 convolutions, global pooling and a linear classifier, trained with SGD.
import random

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
on_cuda = device.type == "cuda"
print(f"device: {device}, torch {torch.__version__}, "
      f"cuDNN available: {torch.backends.cudnn.is_available()}, "
      f"benchmark flag: {torch.backends.cudnn.benchmark}")
if not on_cuda:
    print("Skipped: cudnn.benchmark only steers cuDNN on CUDA; no CUDA device here")

channels = 64
net = torch.nn.Sequential(
    torch.nn.Conv2d(3, channels, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(channels, 10),
).to(device)
optimizer = torch.optim.SGD(net.parameters(), lr=1e-3)


# %%
# The two settings
# ----------------
# The same training step, with the global flag set before it.
def train_step(flag, x, y):
    torch.backends.cudnn.benchmark = flag
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    optimizer.step()


# %%
# Check: the flag changes speed, not the answer (up to algorithm rounding)
# ------------------------------------------------------------------------
# Each setting runs a shape it has never seen (32x33 for True, 33x32 for False), so each uses
# the algorithm it picks itself, and is compared with the same net run without cuDNN. cuDNN may
# run float32 convolutions in TF32 (``torch.backends.cudnn.allow_tf32`` is on by default), and
# algorithms round differently, so the outputs agree to a TF32-sized tolerance, not float32's.
if on_cuda:
    for flag, (h, w) in ((True, (32, 33)), (False, (33, 32))):
        x = torch.randn(8, 3, h, w, device=device)  # [batch, channels, height, width]
        with torch.no_grad():
            with torch.backends.cudnn.flags(enabled=False):
                reference = net(x)
            torch.backends.cudnn.benchmark = flag
            torch.testing.assert_close(net(x), reference, rtol=1e-2, atol=1e-2)
    print("benchmark False and True both match the net without cuDNN (to 1e-2)")

# %%
# Measurement 1: a fixed input shape
# ----------------------------------
# Per image size, ``compare_times`` runs one untimed step with each setting first, so that
# autotuning (benchmark=True) is cached; then the rounds time the steady state. Each setting
# has its own shape of the same size, side x (side + 1) for False and (side + 1) x side for
# True: on one shared shape True would reuse the algorithm False picked. Speed-up = time
# with False / time with True. ``torch.utils.benchmark`` synchronises CUDA around each timed
# block. The convolutions need enough work per step to keep a GPU busy: on a tiny net a step is
# bound by kernel launches, and no algorithm choice can show. So the batch grows with the GPU:
# one image per streaming multiprocessor, whatever GPU runs it (132 on an H100 SXM: a 96x96 step
# is then about 0.5 TFLOP of convolutions, forward and backward).
sides = [24, 40, 64, 96]
fixed, changing, skipped = [], [], []
if on_cuda:
    batch = torch.cuda.get_device_properties(device).multi_processor_count
    print(f"batch: {batch} images, one per streaming multiprocessor")
    for side in sides:
        x_off = torch.randn(batch, 3, side, side + 1, device=device)  # [batch, 3, h, w]
        x_on = torch.randn(batch, 3, side + 1, side, device=device)  # the same pixels
        y = torch.randint(0, 10, (batch,), device=device)  # [batch] class labels
        fixed.append(compare_times(
            f"fixed shape {side}x{side + 1}: speed-up of True",
            {"benchmark=False": lambda: train_step(False, x_off, y),
             "benchmark=True": lambda: train_step(True, x_on, y)},
            threshold=1.05, device=device, x=side, budget_s=2.0))
else:
    skipped.append("all timings: cudnn.benchmark is a CUDA (cuDNN) setting; "
                   "no CUDA device here")

# %%
# Measurement 2: a new input shape every few steps
# ------------------------------------------------
# Each timed call takes an input shape never seen before and runs a few training steps with it,
# so benchmark=True autotunes once per call. Both settings pay what cuDNN does for any new
# shape; benchmark=True adds its trials. The two settings draw from disjoint sets of shapes
# (even height and odd width for False; the same shapes turned on their side for True, in the
# same shuffled order), so neither profits from the other's cache and each call of one does
# the same work as the matching call of the other. Slow-down = time with True / time with
# False.
shapes = [(n, h, w) for n in range(2, 10) for h in range(12, 60, 2)
          for w in range(13, 60, 2)]  # (batch, height, width): 4,608 shapes a setting
random.Random(0).shuffle(shapes)
unseen = {False: iter(shapes), True: iter((n, w, h) for n, h, w in shapes)}


def steps_on_new_shape(flag, steps):
    n, h, w = next(unseen[flag])
    x = torch.randn(n, 3, h, w, device=device)  # [batch, 3, h, w]
    y = torch.randint(0, 10, (n,), device=device)  # [batch] class labels
    for _ in range(steps):
        train_step(flag, x, y)


if on_cuda:
    for steps in [1, 2, 4, 8]:
        changing.append(compare_times(
            f"new shape every {steps} steps: slow-down of True",
            {"benchmark=True": lambda: steps_on_new_shape(True, steps),
             "benchmark=False": lambda: steps_on_new_shape(False, steps)},
            threshold=1.05, device=device, x=steps, budget_s=2.0))
torch.backends.cudnn.benchmark = False  # the default, for whatever runs next

# %%
# Where it pays, where it costs
# -----------------------------
# First the fixed shape: above 1.0, benchmark=True trains faster. Then the changing shapes:
# above 1.0, benchmark=True trains slower.
if on_cuda:
    fig = plot_ratios({"fixed input shape": fixed},
                      xlabel="image side, pixels (log scale)",
                      ylabel="time with False / time with True",
                      title=f"Training step, 3-conv net, {channels} channels, "
                            f"batch {batch}")
    fig = plot_ratios({"new input shape every few steps": changing},
                      xlabel="training steps per input shape (log scale)",
                      ylabel="time with True / time with False",
                      title="Training steps, 3-conv net, batch 2-9, 12-59 px sides")

# %%
# Verdict
# -------
# The claim has two halves: a gain for a fixed shape and a loss for changing shapes. A
# comparison shows the effect when its interval lies above 1.05 and clearly not when it lies
# below; in between it is inside the noise.
RULE = ("CUDA only: holds if benchmark=True makes training steps >5% faster (interval "
        "above 1.05) at some image size with a fixed shape and >5% slower at some "
        "rate of new shapes; wrong if with a fixed shape it is clearly not >5% faster "
        "(interval below 1.05) at any size; depends otherwise")
verdicts = {}
if on_cuda:
    decision = decide(device, [("holds", {"fixed shape": "any above",
                                          "changing shapes": "any above"}),
                               ("wrong", {"fixed shape": "all below"}),
                               ("depends", {})],
                      groups={"fixed shape": fixed, "changing shapes": changing},
                      key=fixed[-1])
    report(decision, RULE)
    verdicts["cuda"] = decision
else:
    print("Verdict on CUDA: not measured (no CUDA device in this build); none on CPU")
RESULT = {"rule": RULE, "verdicts": verdicts, "measurements": [], "skipped": skipped}

# %%
# When not to use it
# ------------------
# Leave the flag off when shapes vary from batch to batch (variable-length sequences,
# multi-scale training); a last batch of a different size adds only one more autotune. Leave it
# off too when you need run-to-run reproducibility: autotuning may pick different algorithms on
# different runs (see ``torch.backends.cudnn.deterministic``). On CPU it does nothing.

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
with a fixed input shape for 1x1, 3x3 and 5x5 convolutions, and with a new input shape every
few steps; both halves of the claim decide.
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
# Three convolutions (a 3x3 stem, then two of the kernel size measured), global pooling and
# a linear classifier, trained with SGD.
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


def make_net(kernel=3):
    """A 3x3 stem, two ``kernel`` x ``kernel`` convolutions, pooling, a classifier."""
    pad = kernel // 2
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, channels, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(channels, channels, kernel, padding=pad), torch.nn.ReLU(),
        torch.nn.Conv2d(channels, channels, kernel, padding=pad), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(channels, 10),
    ).to(device)
    return net, torch.optim.SGD(net.parameters(), lr=1e-3)


# %%
# The two settings
# ----------------
# The same training step, with the global flag set before it.
def train_step(flag, net, optimizer, x, y):
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
    net, _ = make_net()
    for flag, (h, w) in ((True, (32, 33)), (False, (33, 32))):
        x = torch.randn(8, 3, h, w, device=device)  # [batch, channels, height, width]
        with torch.no_grad():
            with torch.backends.cudnn.flags(enabled=False):
                reference = net(x)
            torch.backends.cudnn.benchmark = flag
            torch.testing.assert_close(net(x), reference, rtol=1e-2, atol=1e-2)
    print("benchmark False and True both match the net without cuDNN (to 1e-2)")

# %%
# Measurement 1: a fixed input shape, several convolution shapes
# --------------------------------------------------------------
# For each kernel size, ``compare_times`` runs one untimed step with each setting first, so
# that autotuning (benchmark=True) is cached; then the rounds time the steady state. cuDNN's
# default choice is a heuristic, and how close it comes to the fastest algorithm depends on
# the convolution's shape, so the kernel size sweeps 1x1, 3x3 and 5x5. Each setting has its
# own input shape of the same size, 64x65 for False and 65x64 for True: on one shared shape
# True would reuse the algorithm False picked. Speed-up = time with False / time with True.
# ``torch.utils.benchmark`` synchronises CUDA around each timed block. The convolutions need
# enough work per step to keep a GPU busy: on a tiny batch a step is bound by kernel launches,
# and no algorithm choice can show. So the batch grows with the GPU: one image per streaming
# multiprocessor (SM), whatever GPU runs it.
kernels, side = [1, 3, 5], 64
fixed, changing, skipped = [], [], []
if on_cuda:
    batch = torch.cuda.get_device_properties(device).multi_processor_count
    print(f"batch: {batch} images, one per streaming multiprocessor")
    x_off = torch.randn(batch, 3, side, side + 1, device=device)  # [batch, 3, h, w]
    x_on = torch.randn(batch, 3, side + 1, side, device=device)  # the same pixels
    y = torch.randint(0, 10, (batch,), device=device)  # [batch] class labels
    for kernel in kernels:
        net, optimizer = make_net(kernel)
        fixed.append(compare_times(
            f"fixed shape, {kernel}x{kernel} convolutions: speed-up of True",
            {"benchmark=False": lambda: train_step(False, net, optimizer, x_off, y),
             "benchmark=True": lambda: train_step(True, net, optimizer, x_on, y)},
            threshold=1.05, device=device, x=kernel, budget_s=1.5))
else:
    skipped.append("all timings: cudnn.benchmark is a CUDA (cuDNN) setting; "
                   "no CUDA device here")

# %%
# Measurement 2: a new input shape every few steps
# ------------------------------------------------
# Each timed call takes an input shape never seen before and runs a few training steps with it
# (the 3x3 net, the same batch), so benchmark=True autotunes once per call. Both settings pay
# what cuDNN does for any new shape; benchmark=True adds its trials. The two settings draw
# from disjoint sets of shapes (even height and odd width for False; the same shapes turned on
# their side for True, in the same shuffled order), none of them a shape measurement 1 used,
# so neither profits from a cache and each call of one does the same work as the matching
# call of the other. Slow-down = time with True / time with False. Each call of True costs a
# round of autotuning, so these comparisons stop after 3 rounds once past their time budget.
# What a new shape costs is mostly the host's: cuDNN builds and searches execution plans for
# it on the CPU, between short trial kernels. So these timings are about the host, and need
# no profiled pass to say how busy the GPU was (``busy=False``).
shapes = [(h, w) for h in range(24, 60, 2) for w in range(25, 60, 2)]  # 324 a setting
random.Random(0).shuffle(shapes)
unseen = {False: iter(shapes), True: iter((w, h) for h, w in shapes)}


def steps_on_new_shape(flag, steps):  # with the 3x3 net
    h, w = next(unseen[flag])
    x = torch.randn(batch, 3, h, w, device=device)  # [batch, 3, h, w]
    for _ in range(steps):
        train_step(flag, net, optimizer, x, y)


if on_cuda:
    net, optimizer = make_net(3)  # the 3x3 net again, its weights fresh
    for steps in [1, 4, 16]:
        changing.append(compare_times(
            f"new shape every {steps} steps: slow-down of True",
            {"benchmark=True": lambda: steps_on_new_shape(True, steps),
             "benchmark=False": lambda: steps_on_new_shape(False, steps)},
            threshold=1.05, device=device, x=steps, budget_s=1.0, min_rounds=3,
            busy=False))
torch.backends.cudnn.benchmark = False  # the default, for whatever runs next

# %%
# Where it pays, where it costs
# -----------------------------
# First the fixed shape: above 1.0, benchmark=True trains faster. Then the changing shapes:
# above 1.0, benchmark=True trains slower.
if on_cuda:
    fig = plot_ratios({"fixed input shape": fixed},
                      xlabel="kernel size of the two inner convolutions (log scale)",
                      ylabel="time with False / time with True",
                      title=f"Training step, 3-conv net, {channels} channels, "
                            f"batch {batch}, {side}x{side + 1} images")
    fig = plot_ratios({"new input shape every few steps": changing},
                      xlabel="training steps per input shape (log scale)",
                      ylabel="time with True / time with False",
                      title=f"Training steps, 3x3 net, batch {batch}, 24-59 px sides")

# %%
# Verdict
# -------
# The claim has two halves, and both decide: a gain for a fixed shape (the recommendation) and
# a loss for changing shapes (the warning). A comparison shows the effect when its interval
# lies above 1.05 and clearly not when it lies below; in between it is inside the noise. It
# holds when both halves show, is wrong when neither does, and depends (on how often the
# shape changes, or on the convolution) when one does. The fixed-shape half is about what the
# GPU runs (the algorithm cuDNN picked): a comparison at which the GPU idled half the time or
# more is shown, labelled, and decides nothing. The changing-shape half is about the host's
# plan search for each new shape, so every one of its comparisons counts
# (``about={"changing shapes": "host"}``).
RULE = ("CUDA only: holds if benchmark=True makes training steps >5% faster (interval "
        "above 1.05) with a fixed shape for some convolution shape and >5% slower at "
        "some rate of new shapes; wrong if neither (intervals below 1.05 in both "
        "halves); depends otherwise. Fixed shape: only comparisons that kept the GPU "
        "busy at least half the time decide; changing shapes: the host's plan search, "
        "every comparison decides")
verdicts = {}
if on_cuda:
    decision = decide(device, [("holds", {"fixed shape": "any above",
                                          "changing shapes": "any above"}),
                               ("wrong", {"fixed shape": "all below",
                                          "changing shapes": "all below"}),
                               ("depends", {})],
                      groups={"fixed shape": fixed, "changing shapes": changing},
                      key=fixed[-1], about={"fixed shape": "device",
                                            "changing shapes": "host"})
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

"""
Resume training exactly: what a checkpoint must hold
====================================================

PyTorch's recipe *Saving and loading a general checkpoint in PyTorch* (claim S6-21):

    "When saving a general checkpoint, you must save more than just the model's state_dict. It
    is important to also save the optimizer's state_dict, as this contains buffers and
    parameters that are updated as the model trains."

The recipe saves the model and the optimizer, plus the epoch and the last loss. A training run
holds more state than that: the learning-rate scheduler's position, the ``GradScaler``'s scale
when training in float16, and the random number generators that draw dropout masks (and data
order). This tip trains a small model, checkpoints it halfway, and resumes from that checkpoint
in fresh objects, as a new process would: once with everything, once with the model alone (the
common mistake), and once without each other piece. It then compares every resumed run with the
run that was never interrupted, bit for bit.
"""
# sphinx_gallery_tips_claims = ["S6-21"]
# sphinx_gallery_tips_tags = ["checkpoint", "training", "reproducibility"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "2.3"
# sphinx_gallery_tips_takeaway = "Resume from model, optimizer, scheduler, GradScaler and RNG states: leave any out and the resumed run leaves the original one; with all it repeats bit for bit."
# sphinx_gallery_tips_keywords = ["checkpoint", "resume training", "save checkpoint", "load checkpoint", "optimizer.state_dict", "scheduler.state_dict", "GradScaler state_dict", "get_rng_state", "set_rng_state", "continue training", "torch.save", "torch.load", "load_state_dict"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/saving_and_loading_a_general_checkpoint.html", "https://docs.pytorch.org/docs/stable/generated/torch.optim.Optimizer.state_dict.html", "https://docs.pytorch.org/docs/stable/amp.html#gradient-scaling", "https://docs.pytorch.org/docs/stable/random.html"]
# sphinx_gallery_tips_related = ["tip_state_dict", "tip_weights_only_load", "tip_deterministic_algorithms"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). Facts
# are what the tip observed on this device: whether a resumed run's weights equal, bit for bit,
# those of the run that was never interrupted. A verdict is the first case of the rule whose
# conditions the facts meet.
from tipsite.tipkit import decide, plot_series, report


# %%
# Setup
# -----
# A small regression model with dropout (random masks every step), AdamW (moment buffers per
# parameter), a cosine learning-rate schedule (a new rate every step) and float16 autocast with
# a ``GradScaler``. The scaler gets ``growth_interval=4`` so that its scale moves (and some
# steps are skipped on overflow) within this short run, as it does over thousands of steps with
# the default of 2000. Each half of the run is 20 steps. The tip restores torch's random states
# when it is done, so running it leaves your session's generators as they were.
import os
import tempfile

import torch
from torch import nn

torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")
HALF = 20
g = torch.Generator().manual_seed(0)
X = torch.randn(2 * HALF, 32, 32, generator=g).to(device)  # [steps, batch, features]
Y = torch.randn(2 * HALF, 32, 1, generator=g).to(device)   # [steps, batch, 1]


def make_training():
    """Fresh model, optimizer, scheduler and scaler, as a new process builds them."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.1),
                          nn.Linear(64, 1)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=2 * HALF)
    scaler = torch.amp.GradScaler(device.type, growth_interval=4)
    return {"model": model, "optimizer": opt, "scheduler": sched, "scaler": scaler}


def train_step(t, step):
    with torch.autocast(device.type, dtype=torch.float16):
        loss = nn.functional.mse_loss(t["model"](X[step]), Y[step])
    t["optimizer"].zero_grad(set_to_none=True)
    t["scaler"].scale(loss).backward()
    t["scaler"].step(t["optimizer"])  # skips the step if a gradient overflowed
    t["scaler"].update()
    t["scheduler"].step()


def weights(t):
    return torch.cat([p.detach().flatten().float() for p in t["model"].parameters()])


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# ``save_checkpoint`` writes every piece of state; ``resume`` builds fresh objects and loads
# the pieces it is told to. The random states are CPU tensors (``torch.set_rng_state`` wants
# one), so the file is loaded onto the CPU: ``load_state_dict`` copies each tensor onto its
# parameter's device. ``weights_only=True`` loads tensors and plain data, never code.
PIECES = ("optimizer", "scheduler", "scaler", "rng")


def save_checkpoint(t, step, path):
    torch.save({
        "step": step,
        "model": t["model"].state_dict(),
        "optimizer": t["optimizer"].state_dict(),
        "scheduler": t["scheduler"].state_dict(),
        "scaler": t["scaler"].state_dict(),
        "rng": {"cpu": torch.get_rng_state(),
                "cuda": (torch.cuda.get_rng_state_all() if device.type == "cuda"
                         else [])},
    }, path)


def resume(path, pieces=PIECES):
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    t = make_training()
    t["model"].load_state_dict(ckpt["model"])  # the anti-pattern stops here
    for name in ("optimizer", "scheduler", "scaler"):
        if name in pieces:
            t[name].load_state_dict(ckpt[name])
    if "rng" in pieces:
        torch.set_rng_state(ckpt["rng"]["cpu"])
        if device.type == "cuda":
            torch.cuda.set_rng_state_all(ckpt["rng"]["cuda"])
    return t, ckpt["step"]


# %%
# Run: once without interruption, then resumed from the halfway checkpoint
# ------------------------------------------------------------------------
# After each resumed step, the largest difference between the resumed run's weights and the
# uninterrupted run's weights at the same step.
variants = {"everything (model, optimizer, scheduler, scaler, RNG)": PIECES,
            "model only (the anti-pattern)": ()}
for left_out in PIECES:
    variants[f"everything but the {left_out} state"] = tuple(
        p for p in PIECES if p != left_out)

cuda_devices = list(range(torch.cuda.device_count()))
with torch.random.fork_rng(devices=cuda_devices), tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "checkpoint.pt")
    run = make_training()
    reference = []
    for step in range(2 * HALF):
        if step == HALF:
            save_checkpoint(run, step, path)
        train_step(run, step)
        reference.append(weights(run))
    scale_at_end = run["scaler"].get_scale()
    distance = {}
    for label, pieces in variants.items():
        t, start = resume(path, pieces)
        distance[label] = []
        for step in range(start, 2 * HALF):
            train_step(t, step)
            diff = (weights(t) - reference[step]).abs().max().item()
            distance[label].append(diff)
print(f"GradScaler scale at the end of the uninterrupted run: {scale_at_end:g}")
for label, d in distance.items():
    print(f"{label:55s} max |weight difference| after {HALF} steps: {d[-1]:.3g}")

# %%
# Check
# -----
# The full checkpoint must reproduce the uninterrupted run exactly: the same weights, bit for
# bit, after every resumed step.
identical = {label: all(v == 0.0 for v in d) for label, d in distance.items()}
full = "everything (model, optimizer, scheduler, scaler, RNG)"
assert identical[full], "the full checkpoint should repeat the run bit for bit"
print("full checkpoint: identical to the uninterrupted run after every step")

# %%
# Where the runs part
# -------------------
# Distance from the uninterrupted run after each resumed step: 0 for the full checkpoint.
steps = list(range(HALF + 1, 2 * HALF + 1))
fig = plot_series({label: (steps, d) for label, d in distance.items()},
                  xlabel="training step (resumed at step 20)",
                  ylabel="max |weight - uninterrupted weight|",
                  title="Resumed runs against the run never interrupted", device=device)

# %%
# Verdict
# -------
# The recipe's claim is that the model's ``state_dict`` is not enough to resume. It holds if a
# model-only resume leaves the uninterrupted run while the full checkpoint repeats it bit for
# bit, and leaving out the optimizer's state alone (the piece the recipe names) is enough to
# leave it; the facts also say which other pieces this run needed (scheduler, scaler and
# random states). It is wrong if the model alone already repeats the run.
facts = {f"resume with {label}: identical": same for label, same in identical.items()}
RULE = ("holds if resuming from the model's state_dict alone, or from everything but "
        "the optimizer's state, does not repeat the uninterrupted run while the full "
        "checkpoint (model, optimizer, scheduler, GradScaler, RNG states) repeats it "
        "bit for bit; wrong if the model alone repeats it; depends otherwise")
decision = decide(device, [
    ("holds", {"resume with model only (the anti-pattern): identical": False,
               "resume with everything but the optimizer state: identical": False,
               f"resume with {full}: identical": True}),
    ("wrong", {"resume with model only (the anti-pattern): identical": True}),
    ("depends", {}),
], facts=facts, key={"name": f"model-only resume: max |weight difference| after {HALF} "
                             "steps", "value": distance[
                                 "model only (the anti-pattern)"][-1], "unit": ""})
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# For inference, or to fine-tune from pretrained weights, the model's ``state_dict`` is all you
# need. To resume, save everything that changes while training: model, optimizer, scheduler,
# ``GradScaler`` (when you use one), the step or epoch, and the random states of every
# generator you use (``torch.get_rng_state()``, ``torch.cuda.get_rng_state_all()``, and
# Python's or NumPy's if your data pipeline draws from them). Bit-for-bit repeats also need the
# same data order (a sampler seeded per epoch, or its position saved) and deterministic kernels
# on the GPU; a run that only needs to continue *statistically* can skip the random states.

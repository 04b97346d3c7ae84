"""
``DataLoader`` workers: when does ``num_workers > 0`` pay?
==========================================================

The seed articles never discuss the ``DataLoader``'s own settings. PyTorch's *Performance Tuning
Guide* does ("Enable asynchronous data loading and augmentation"):

    "Setting ``num_workers > 0`` enables asynchronous data loading and overlap
    between the training and data loading. ``num_workers`` should be tuned
    depending on the workload, CPU, GPU, and location of training data."

The same section recommends ``pin_memory=True`` for GPU training; that setting has a tip of its
own, so this one changes only the number of workers. Workers are separate processes: they pay
when preparing a batch costs more than handing it over between processes, and only with spare
cores to run on while the main process trains. So the answer should depend on the work per
batch. This tip sweeps it: a dataset whose ``__getitem__`` does a chosen amount of CPU work per
sample (from almost none to a fraction of a millisecond), consumed by a small training-like
step, loaded with ``num_workers=0`` and with persistent workers.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["data-loading", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.7"
# sphinx_gallery_tips_takeaway = "DataLoader workers pay when each batch takes real CPU work to prepare and cores are spare; with trivial __getitem__ they cost time."
# sphinx_gallery_tips_statement = "num_workers > 0 speeds up training by overlapping data loading with the training step (PyTorch Performance Tuning Guide)."
# sphinx_gallery_tips_keywords = ["DataLoader", "num_workers", "persistent_workers", "multiprocessing_context", "fork", "data loading speed"]
# sphinx_gallery_tips_related = ["tip_pin_memory"]
# sphinx_gallery_tips_rules = ["PTT020"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/docs/stable/data.html"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, anti-pattern time / recommended time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import (compare_times, decide,
                            plot_ratios, report)


# %%
# Setup
# -----
# Each sample is a 3x32x32 image held in memory; ``__getitem__`` copies it and runs ``steps``
# small in-place ops on the copy, a stand-in for decoding and augmenting a real image. One step
# is almost no work; many steps are real CPU work per sample. One thread in the main process,
# as in each worker (the DataLoader gives its workers one thread each), so the processes do not
# fight over cores. One worker per core, up to 4: the main process's training step here is
# one small matmul, so it mostly waits for batches; with a real CPU training step, leave it
# a core (see the end of this page).
import multiprocessing
import os

import torch
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
         else os.cpu_count())
workers = max(1, min(4, cores))
print(f"device: {device}, cores: {cores}, workers: {workers}, "
      f"torch {torch.__version__}")


class AugmentedImages(Dataset):
    """In-memory images; an item is a copy put through ``steps`` small in-place ops."""

    def __init__(self, steps, n=96):
        self.steps = steps
        g = torch.Generator().manual_seed(0)
        self.images = torch.rand(n, 3, 32, 32, generator=g)  # [N, C, H, W]

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        img = self.images[i].clone()  # [C, H, W]
        for _ in range(self.steps):  # the per-sample CPU work
            img.mul_(0.999).add_(0.001)
        return img, i % 10


weights = torch.randn(3 * 32 * 32, 256, device=device)  # a stand-in "model"


def train_step(batch):
    imgs, _ = batch
    imgs = imgs.to(device, non_blocking=True)
    return (imgs.flatten(1) @ weights).relu().sum()


def epoch(loader):
    for batch in loader:
        train_step(batch)


# %%
# Worker start method
# -------------------
# sphinx-gallery and notebooks run this code in a module that child processes cannot import,
# so ``spawn`` workers could not unpickle ``AugmentedImages``. ``fork`` copies the parent
# instead (the Linux default up to Python 3.13), made explicit here. Where ``fork`` does not
# exist (Windows), the workers are not measured.
fork_ok = "fork" in multiprocessing.get_all_start_methods()
print("start methods available:", multiprocessing.get_all_start_methods())

# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# Default: ``num_workers=0``, the main process prepares every batch between training steps.
# Recommended: ``workers`` persistent worker processes (started once, not every epoch) that
# prepare the next batches while the main process trains.
batch_size = 16


def plain_loader(dataset):
    return DataLoader(dataset, batch_size=batch_size)


def worker_loader(dataset):
    return DataLoader(dataset, batch_size=batch_size, num_workers=workers,
                      persistent_workers=True, multiprocessing_context="fork")


# %%
# Check: same batches, in the same order
# --------------------------------------
# Workers must not change what the model sees.
if fork_ok:
    dataset = AugmentedImages(steps=4)
    ref = [b[0] for b in plain_loader(dataset)]
    got = [b[0] for b in worker_loader(dataset)]
    assert len(got) == len(ref) and all(torch.equal(a, b) for a, b in zip(ref, got))
    print(f"both loaders yield the same {len(ref)} batches")

# %%
# Measurement
# -----------
# One timed call = one epoch: 6 batches of 16 samples. The workers of each loader are started
# before the timing (persistent), so their start-up is not timed; each epoch still refills
# the workers' prefetch queue, as every epoch of a real training run does. Speed-up = epoch time
# with ``num_workers=0`` / epoch time with workers.
steps_per_sample = [1, 8, 64, 512]
speedups, skipped = [], []
if fork_ok:
    for steps in steps_per_sample:
        dataset = AugmentedImages(steps)
        plain, pooled = plain_loader(dataset), worker_loader(dataset)
        epoch(pooled)  # starts the persistent workers
        speedups.append(compare_times(
            f"{workers} workers, {steps} steps per sample",
            {"num_workers=0": lambda: epoch(plain),
             f"num_workers={workers}": lambda: epoch(pooled)},
            threshold=1.1, device=device, x=steps, budget_s=1.0, cores=cores))
        del plain, pooled  # shuts the workers down
else:
    skipped.append("workers: no 'fork' start method on this platform")
    print("Skipped: the workers need the 'fork' start method here")

# Workers need cores to run on: other processes' CPU use, in cores, during the
# busiest work level's timing (the main process and its workers are not counted).
# A level whose timing saw others use a quarter of a core makes the verdict "busy"
# (compare_times records it, decide reads it).
loads = [c["cores"]["others"] for c in speedups]
others = None if not loads or None in loads else max(loads)
spare = None if others is None or cores < 2 else others < 0.25
print("other processes' CPU use while timing, cores (busiest level):", others)

# %%
# Where it pays, where it costs
# -----------------------------
# Above 1.0 the workers win; below, handing batches between processes costs more than the
# overlap saves.
if speedups:
    fig = plot_ratios({f"num_workers={workers} (persistent) vs 0": speedups},
                      xlabel="steps of CPU work per sample (log scale)",
                      title=f"One epoch, 96 samples, batch {batch_size}, "
                            f"{cores} cores")

# %%
# Verdict
# -------
# A work level *gains* when the interval of its speed-up lies above 1.1, clearly does not when
# it lies below, and is inside the noise otherwise. The guide says to tune ``num_workers`` to
# the workload: if workers gain at some work levels and not at others, the verdict is that it
# depends on the work per batch, and the figure shows where. "Wrong" needs the cores free:
# when other processes held them, the workers had none to run on, and the rule says it
# depends on free cores instead. "Wrong" also needs the workers to be clearly slower
# (interval below 1.0) at the most work per sample, where they should pay most: on a
# small shared machine that level's speed-up varies between runs of the same code by more
# than one run's interval shows, and one slow run must not call the advice wrong. Workers
# share the host's work of making batches, so on a GPU every timing counts, host-bound ones
# too (``about="host"``).
heaviest = speedups[-1] if speedups else None
slower_at_most_work = heaviest is not None and heaviest["high"] < 1.0
RULE = (f"holds if {workers} workers make an epoch >1.1x faster than num_workers=0 "
        "(interval above 1.1) at every amount of work per sample; wrong if, with the "
        "cores free (other processes below 0.25 cores at every level), below 1.1 at "
        "every one and clearly slower (below 1.0) at the most work; depends otherwise "
        "(on the work per batch, or on free cores). The work is the host's: on a GPU "
        "a host-bound timing counts")
verdicts = {}
if speedups:
    decision = decide(device, [("holds", {"speed-up": "all above"}),
                               ("wrong", {"cores free": True,
                                          "speed-up": "all below",
                                          "slower at the most work": True}),
                               ("depends", {})],
                      groups={"speed-up": speedups},
                      facts={"cores": cores, "workers": workers,
                             "other processes (cores)": others, "cores free": spare,
                             "slower at the most work": slower_at_most_work},
                      key=speedups[-1], about="host")
    report(decision, RULE)
    verdicts[device.type] = decision
RESULT = {"rule": RULE, "verdicts": verdicts, "measurements": [], "skipped": skipped}

# %%
# When not to use it
# ------------------
# With a trivial ``__getitem__`` (tensors already in memory), workers add inter-process copies
# and can be slower than ``num_workers=0``: the left end of the figure. Keep ``num_workers`` at
# or below the cores left after the training process's own threads, use
# ``persistent_workers=True`` so workers start once rather than every epoch. For batches that
# go to a GPU, see the pinned-memory tip.

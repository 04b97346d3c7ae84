"""
``persistent_workers=True``: keeping DataLoader workers between epochs
======================================================================

A ``DataLoader`` with ``num_workers > 0`` starts its worker processes when an epoch begins
(``for batch in loader``) and shuts them down when the epoch ends, unless told otherwise.
Its documentation (claim S6-12):

    "If ``True``, the data loader will not shut down the worker processes after a dataset
    has been consumed once. This allows to maintain the workers `Dataset` instances alive."

So with ``persistent_workers=True`` every epoch after the first skips starting the workers
(and their copies of the dataset), which should save a fixed time per epoch: much on short
epochs (a validation loader, a small dataset), little on long ones. This tip checks the
behaviour the quote describes, from inside the workers: which process served each batch, and
what its copy of the dataset remembers. Then it times epochs of 1 to 27 batches with and
without persistent workers.
"""
# sphinx_gallery_tips_claims = ["S6-12"]
# sphinx_gallery_tips_tags = ["data-loading", "training"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.7"
# sphinx_gallery_tips_takeaway = "persistent_workers=True skips restarting DataLoader workers every epoch: a fixed saving per epoch, big for short epochs; workers keep their Dataset copy."
# sphinx_gallery_tips_keywords = ["persistent_workers", "DataLoader", "num_workers", "worker processes", "epoch", "slow first batch", "validation loader", "set_epoch"]
# sphinx_gallery_tips_errors = ["ValueError: persistent_workers option needs num_workers > 0"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/data.html"]
# sphinx_gallery_tips_related = ["tip_dataloader_workers"]

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
# One worker process (each worker costs its own start-up; one keeps this page quick). The
# samples are small images already in memory, so preparing a batch costs little and the
# worker's start-up is what differs between the two loaders. sphinx-gallery and notebooks run
# this code in a module that child processes cannot import, so ``spawn`` workers could not
# unpickle the dataset: the workers ``fork`` (the Linux default up to Python 3.13), made
# explicit. Where ``fork`` does not exist (Windows), nothing is measured.
import multiprocessing
import os
import statistics

import torch
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
torch.set_num_threads(1)
workers, batch_size = 1, 16
fork_ok = "fork" in multiprocessing.get_all_start_methods()
print(f"threads: {torch.get_num_threads()}, workers: {workers}, "
      f"torch {torch.__version__}, fork available: {fork_ok}")


class Images(Dataset):
    """``n`` in-memory images; an item is a scaled copy of one, and its label."""

    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.images = torch.rand(n, 3, 32, 32, generator=g)  # [N, C, H, W]
        self.scale = 1.0

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i] * self.scale, i % 10


def loader(dataset, persistent):
    return DataLoader(dataset, batch_size=batch_size, num_workers=workers,
                      persistent_workers=persistent, multiprocessing_context="fork")


def epoch(loader):
    return [images for images, _ in loader]


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# ``loader(dataset, persistent=False)``: the default, new workers every epoch.
# ``loader(dataset, persistent=True)``: the workers of the first epoch serve every later one.
#
# Check: the same batches, in the same order
# ------------------------------------------
# Against the main process loading alone (``num_workers=0``): one epoch of new workers, and
# two epochs of persistent ones (the second served by the workers the first one started).
if fork_ok:
    dataset = Images(4 * batch_size)
    reference = epoch(DataLoader(dataset, batch_size=batch_size))
    for persistent, epochs in ((False, 1), (True, 2)):
        two = loader(dataset, persistent)
        for _ in range(epochs):
            got = epoch(two)
            assert len(got) == len(reference)
            assert all(torch.equal(a, b) for a, b in zip(reference, got))
    print(f"both loaders yield the reference's {len(reference)} batches")


# %%
# What the workers keep
# ---------------------
# A dataset that reports, with every item, the process that made it and how many items that
# process's copy of the dataset has made so far. Between the two epochs the main process
# changes the dataset (``scale``), as a curriculum or a per-epoch setting would.
class Probe(Dataset):
    def __init__(self):
        self.made, self.scale = 0, 1.0

    def __len__(self):
        return 8

    def __getitem__(self, i):
        self.made += 1
        return torch.tensor([os.getpid(), self.made, self.scale], dtype=torch.float64)


def two_epochs(persistent):
    probe = Probe()
    probes = DataLoader(probe, batch_size=2, num_workers=workers,
                        persistent_workers=persistent, multiprocessing_context="fork")
    first = torch.cat(list(probes))  # [items, (pid, made, scale)]
    probe.scale = 2.0  # changed in the main process between epochs
    second = torch.cat(list(probes))
    return {"same processes": set(first[:, 0].tolist()) == set(second[:, 0].tolist()),
            "state kept": second[:, 1].min().item() > first[:, 1].min().item(),
            "change seen": bool((second[:, 2] == 2.0).all())}


facts = {}
if fork_ok:
    for persistent in (False, True):
        seen = two_epochs(persistent)
        print(f"persistent_workers={persistent}: epoch 2 served by the same processes: "
              f"{seen['same processes']}; their Dataset copies kept their state: "
              f"{seen['state kept']}; they saw the change made between epochs: "
              f"{seen['change seen']}")
        if persistent:
            facts = {"workers outlive the epoch": seen["same processes"],
                     "their Dataset copies stay alive": seen["state kept"],
                     "a change between epochs reaches them": seen["change seen"]}

# %%
# Measurement
# -----------
# One timed call = one epoch: iterate the loader to its end. The persistent loader's workers
# are started before the timing (its first epoch), so what is timed is every later epoch.
# The epoch length sweeps from 1 batch to 27. Speed-up = epoch time with new workers /
# epoch time with persistent ones. A round in which another process stalls the persistent
# loader's epoch can put one ratio below 1.1 by itself; rounds are then added (up to 3 s a
# length) until the interval, which drops the most extreme rounds, says which side it is on.
batches = [1, 3, 9, 27]
speedups, measurements, skipped = [], [], []
if fork_ok:
    for n in batches:
        dataset = Images(n * batch_size)
        fresh, kept = loader(dataset, False), loader(dataset, True)
        epoch(kept)  # starts the persistent workers
        speedups.append(compare_times(
            f"persistent speed-up, {n} batches per epoch",
            {"persistent_workers=False": lambda: epoch(fresh),
             "persistent_workers=True": lambda: epoch(kept)},
            threshold=1.1, device="cpu", x=n, budget_s=3.0))
        del fresh, kept  # shuts the persistent workers down
    first = speedups[0]
    saved = statistics.median(b - c for b, c in zip(first["base"], first["cand"]))
    print(f"time saved per epoch (1 batch, median of the rounds): {saved * 1e3:.1f} ms")
    measurements.append({"variant": "persistent_workers=True", "value": saved,
                         "metric": "time saved per epoch, 1 batch", "unit": "s",
                         "device": "cpu"})
else:
    skipped.append("everything: no 'fork' start method on this platform")
    print("Skipped: the workers need the 'fork' start method here")

# %%
# Where it pays
# -------------
# Above 1.0 persistent workers make the epoch faster. The saving per epoch is fixed, so the
# ratio falls as epochs grow.
if speedups:
    fig = plot_ratios({f"num_workers={workers}, persistent vs not": speedups},
                      xlabel="batches per epoch (log scale)",
                      ylabel="epoch time, new workers / persistent",
                      title=f"DataLoader epoch, batch {batch_size}, in-memory images")

# %%
# Verdict
# -------
# The quote describes behaviour: the workers are not shut down, and their dataset copies stay
# alive. The reason to want it is speed. An epoch length *gains* when the interval of its
# speed-up lies above 1.1, and clearly does not when it lies below; in between it is noise.
RULE = ("holds if, with persistent_workers=True, the same worker processes serve the "
        "next epoch with their Dataset copies' state kept, and an epoch is >10% faster "
        "(interval above 1.1) at every epoch length; wrong if the workers do not "
        "outlive the epoch, or if no length is faster (all below 1.1); depends "
        "otherwise")
verdicts = {}
if speedups:
    decision = decide("cpu", [("wrong", {"workers outlive the epoch": False}),
                              ("holds", {"workers outlive the epoch": True,
                                         "their Dataset copies stay alive": True,
                                         "speed-up": "all above"}),
                              ("wrong", {"speed-up": "all below"}),
                              ("depends", {})],
                      groups={"speed-up": speedups}, facts=facts, key=speedups[-1])
    report(decision, RULE)
    verdicts["cpu"] = decision
RESULT = {"rule": RULE, "verdicts": verdicts, "measurements": measurements,
          "skipped": skipped}

# %%
# When not to use it
# ------------------
# The workers live on with their copies of the dataset, which is the point and the catch:
# a change made to the dataset in the main process after the first epoch (a new ``scale``
# above, a curriculum stage, an epoch number for augmentation) never reaches them, as the
# check shows. Pass such state another way (the sampler runs in the main process and sends
# each index to the workers), or keep new workers per epoch. The workers also hold their
# memory between epochs, and a second persistent loader (validation) keeps its own workers
# alive during training. With long epochs the fixed saving per epoch shrinks against the
# epoch's time: the ratio falls to the right of the figure, whose longest epoch (27 small
# in-memory batches) is still a short one.
# It needs workers to keep: with the default ``num_workers=0``, ``DataLoader(...,
# persistent_workers=True)`` raises ``ValueError: persistent_workers option needs
# num_workers > 0``.

"""
``DataLoader`` workers: ``num_workers``, ``persistent_workers``, ``pin_memory``
===============================================================================

The seed articles never discuss the ``DataLoader``'s own settings. PyTorch's *Performance Tuning
Guide* does ("Enable asynchronous data loading and augmentation"):

    "Setting ``num_workers > 0`` enables asynchronous data loading and overlap
    between the training and data loading. ``num_workers`` should be tuned
    depending on the workload, CPU, GPU, and location of training data."

    "When using a GPU it's better to set ``pin_memory=True``, this instructs
    ``DataLoader`` to use pinned memory and enables faster and asynchronous memory
    copy from the host to the GPU."

Workers are separate processes, so they only help when there are spare cores to run them on
while the main process trains. This tip times an epoch of a dataset whose ``__getitem__`` does
real CPU work, consumed by a small training-like step, on the cores of this build.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["data-loading", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.7"
# sphinx_gallery_tips_takeaway = "num_workers > 0 overlaps loading with training only if spare cores exist; persistent_workers saves the start-up per epoch."
# sphinx_gallery_tips_keywords = ["DataLoader", "num_workers", "persistent_workers", "pin_memory", "multiprocessing_context", "fork"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/docs/stable/data.html"]

# %%
# Setup
# -----
# Each sample is a synthetic 3x64x64 image that goes through a few augmentation-like ops
# (blur, flip, normalise) -- CPU work like decoding and augmenting real images.
import multiprocessing
import os
import statistics
import warnings

import torch
import torch.utils.benchmark as benchmark
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
torch.set_num_threads(min(2, torch.get_num_threads()))
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
print(f"device: {device}, threads: {torch.get_num_threads()}, cores: {cores}, torch {torch.__version__}")


class AugmentedImages(Dataset):
    def __init__(self, n=96):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        img = torch.rand(3, 64, 64, generator=g)  # [C, H, W]
        for _ in range(2):  # repeated blur: the "augmentation" cost
            img = torch.nn.functional.avg_pool2d(img[None], 3, stride=1, padding=1)[0]
        if i % 2:
            img = img.flip(-1)
        return (img - img.mean()) / img.std(), i % 10


dataset = AugmentedImages()
weights = torch.randn(3 * 64 * 64, 512, device=device)  # a stand-in "model"


def train_step(batch):
    imgs, _ = batch
    imgs = imgs.to(device, non_blocking=True)
    return (imgs.flatten(1) @ weights).relu().sum()


# %%
# Worker start method
# -------------------
# sphinx-gallery and notebooks run this code in a module that child processes cannot import,
# so ``spawn`` workers could not unpickle ``AugmentedImages``. ``fork`` copies the parent
# instead; it is the Linux default, made explicit here. Where ``fork`` does not exist (Windows),
# the worker variants are skipped with a note.
fork_ok = "fork" in multiprocessing.get_all_start_methods()
mp_context = "fork" if fork_ok else None
print("start methods available:", multiprocessing.get_all_start_methods())

# %%
# The anti-pattern and the recommended patterns
# ---------------------------------------------
batch_size = 32


def make_loader(workers, persistent=False, pin=False):
    kwargs = dict(num_workers=workers, persistent_workers=persistent, pin_memory=pin)
    if workers:
        kwargs["multiprocessing_context"] = mp_context
    return DataLoader(dataset, batch_size=batch_size, **kwargs)


def epoch(loader, threads=None):
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        for batch in loader:
            train_step(batch)
    finally:
        torch.set_num_threads(before)


# DataLoader workers run torch with 1 thread each. Tiny per-sample ops are often *slower* with
# 2 threads than with 1 (thread hand-off costs more than the op), so a 1-thread synchronous
# epoch separates that effect from the overlap the guide talks about.
variants = {"num_workers=0": make_loader(0), "num_workers=0, 1 thread": make_loader(0)}
thread_cap = {"num_workers=0, 1 thread": 1}
skipped = []
if fork_ok:
    variants["num_workers=2"] = make_loader(2)
    variants["num_workers=2, persistent"] = make_loader(2, persistent=True)
else:
    skipped.append("worker variants: no 'fork' start method on this platform")
    print("Skipped: worker variants need the 'fork' start method here")

# %%
# Check: same batches, in the same order
# --------------------------------------
# Workers must not change what the model sees. ``pin_memory=True`` without a GPU only warns.
ref = [b[0] for b in variants["num_workers=0"]]
for name, loader in list(variants.items())[1:]:
    got = [b[0] for b in loader]
    assert len(got) == len(ref) and all(torch.equal(a, b) for a, b in zip(ref, got)), name
print(f"all loaders yield the same {len(ref)} batches")

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    next(iter(make_loader(0, pin=True)))
pin_warnings = [str(w.message).splitlines()[0] for w in caught if "pin" in str(w.message)]
print("pin_memory=True here:", pin_warnings[0] if pin_warnings else "no warning (a GPU is present)")

# %%
# Measurement
# -----------
# One timed statement = one epoch (3 batches of 32). Non-persistent workers are forked anew
# every epoch, so their start-up is part of each epoch; persistent ones are forked once (in the
# check above). Variants alternate round by round.


def time_interleaved(variants, label, rounds=3, min_run_time=0.1):
    runs = {name: [] for name in variants}
    for _ in range(rounds):
        for name, loader in variants.items():
            timer = benchmark.Timer("epoch(loader, threads)", globals={
                                        "epoch": epoch, "loader": loader,
                                        "threads": thread_cap.get(name)},
                                    label=label, sub_label=name, description=f"{cores} cores",
                                    num_threads=torch.get_num_threads())
            runs[name].append(timer.blocked_autorange(min_run_time=min_run_time))
    return runs


runs = time_interleaved(variants, label="one epoch, 96 samples")
benchmark.Compare([m for ms in runs.values() for m in ms]).print()
ms_per_epoch = {name: [m.median * 1e3 for m in r] for name, r in runs.items()}
base = runs["num_workers=0"]
ratios = {name: [b.median / m.median for b, m in zip(base, r)]
          for name, r in runs.items() if name != "num_workers=0"}
worker_names = [n for n in ratios if "workers=2" in n]
for name, r in ratios.items():
    print(f"speed-up of {name} over num_workers=0: {statistics.median(r):.2f}x "
          f"[{min(r):.2f} .. {max(r):.2f}]")

# %%
# Verdict
# -------
# The guide's mechanism is *overlap*, so the workers are compared with the faster of the two
# synchronous loaders, round by round. The best worker setting (by median) *gains* when even the
# lower quartile of its speed-ups is above 1.10, shows *no gain* when even the upper quartile is
# below 1.10, and is *inside the noise* otherwise. On 2 cores the main process and 2 workers
# share the same cores, so the gain is capped well below 2x, and a machine busy with other
# processes leaves no spare cores at all: the rule then refuses to judge.
RULE = ("holds if the best num_workers>0 variant gains >10% over the faster synchronous variant "
        "(num_workers=0 at 2 or 1 threads; lower quartile of the speed-up above 1.10); wrong if no "
        "gain (upper quartile below 1.10); depends otherwise, where workers cannot run, or when the "
        "1-minute load average exceeded 1.5x the cores (no spare cores for workers)")


def classify(r, threshold):
    """'gain' if even the lower quartile of the per-round ratios beats the threshold, 'no gain' if
    even the upper quartile misses it, 'noise' otherwise (one disturbed round cannot decide)."""
    q1, _, q3 = statistics.quantiles(r, n=4)
    return "gain" if q1 > threshold else "no gain" if q3 < threshold else "noise"


load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
print(f"1-minute load average: {load:.1f} on {cores} cores")
sync_best = [min(a.median, b.median) for a, b in zip(runs["num_workers=0"],
                                                      runs["num_workers=0, 1 thread"])]
overlap = {n: [s / m.median for s, m in zip(sync_best, runs[n])] for n in worker_names}
if not worker_names:
    verdict, best_name, best = "depends", None, None
else:
    best_name = max(worker_names, key=lambda n: statistics.median(overlap[n]))
    best = statistics.median(overlap[best_name])
    cls = classify(overlap[best_name], 1.10)
    if load > 1.5 * cores:
        verdict = "depends"
        print("The machine was busy with other processes: workers had no spare cores to use.")
    else:
        verdict = {"gain": "holds", "no gain": "wrong", "noise": "depends"}[cls]
summary = "workers not measured"
if best:
    summary = (f"best: {best_name}, {statistics.median(ratios[best_name]):.2f}x faster than the "
               f"default num_workers=0; against the best synchronous loader it runs at {best:.2f}x "
               f"({cls}); any difference between the two figures comes from running tiny "
               f"per-sample ops on 1 thread")
print(f"Verdict: {verdict}. On {cores} cores, {summary}.")
print(f"Rule: {RULE}")
if not torch.cuda.is_available():
    skipped.append("pin_memory timing: pinned memory speeds host-to-GPU copies; no CUDA device in this build")
    print("Skipped: pin_memory timing needs CUDA (no CUDA device in this build)")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": None if best is None else {"name": f"speed-up over best synchronous, {best_name}",
                                      "value": best, "low": min(overlap[best_name]),
                                      "high": max(overlap[best_name]), "unit": "x"},
    "measurements": [
        {"variant": name, "metric": "time per epoch", "unit": "ms",
         "value": statistics.median(v), "spread": max(v) - min(v)}
        for name, v in ms_per_epoch.items()
    ],
    "skipped": skipped,
}

# %%
# When not to use it
# ------------------
# With trivial ``__getitem__`` (tensors already in memory), workers add inter-process copying
# and start-up and can be slower than ``num_workers=0``. Keep ``num_workers`` at or below the
# cores left after the training process's own threads, use ``persistent_workers=True`` when
# epochs are short, and ``pin_memory=True`` only when batches go to a GPU.

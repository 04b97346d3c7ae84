"""
Retrying with a smaller batch after out-of-memory
=================================================

To find the largest batch that fits, the article catches the out-of-memory ``RuntimeError``
and builds a new ``DataLoader`` with a smaller batch (claim S4-1), saying that

    "the following hacky snippet automatically adjusts the batch size to a level where it fits
    in memory."

::

    training_loader = DataLoader(..., batch_size=batch_size)

    for input, output in training_loader:
        try:
            opt.zero_grad()
            pred = model(input)
            loss = loss_fn(output, pred)
            loss.backward()
            opt.step()
        except RuntimeError:  # CUDA: Out of memory is a generic RTE
            batch_size -= 1
            training_loader = DataLoader(..., batch_size=batch_size)

Two things in it deserve a run. The ``for`` statement took its iterator from the first
``DataLoader``; binding the name ``training_loader`` to a new one changes nothing until the
next epoch, so every remaining batch of the epoch has the old size. And ``except RuntimeError``
also catches shape, dtype and device errors (``torch.OutOfMemoryError`` is one subclass of
``RuntimeError`` among many). This tip runs the loop, epoch after epoch, under a memory limit
(a real one on CUDA, a stand-in on the CPU), then a fix that finds the batch size first.
"""
# sphinx_gallery_tips_claims = ["S4-1"]
# sphinx_gallery_tips_tags = ["training", "cuda"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "After an out-of-memory error the article's loop keeps the old DataLoader: the rest of the epoch is skipped. Find the batch first; catch only OutOfMemoryError."
# sphinx_gallery_tips_rules = ["PTT028"]
# sphinx_gallery_tips_keywords = ["out of memory", "OutOfMemoryError", "CUDA out of memory", "CUDA out of memory during training", "Tried to allocate", "OOM", "batch size", "set_per_process_memory_fraction", "max_memory_allocated", "retry"]
# sphinx_gallery_tips_errors = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.16 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.63 GiB is free. Including non-PyTorch memory, this process has 77.42 GiB memory in use. Of the allocated memory 68.16 GiB is allocated by PyTorch, and 3.49 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)", "RuntimeError: CUDA error: out of memory"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.cuda.set_per_process_memory_fraction.html", "https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). Memory is
# measured, not computed: exact byte counts of live tensors on the CPU, the CUDA caching
# allocator's own counters on a GPU. Each comparison pairs the anti-pattern with the
# recommended pattern, one pair per round (here: per step count or size), as a difference or a
# ratio; the interval is a ~95% confidence interval for its median (with 5 rounds or fewer,
# their whole range). A verdict is the first case of the rule whose conditions the
# measurements meet.
from tipsite.tipkit import compare_values, decide, plot_series, report


# %%
# Setup
# -----
# A two-layer MLP and 8 batches of data per epoch at the starting batch size. ``OOM`` is the
# out-of-memory class, under whichever name this torch version offers it.
import contextlib
import weakref

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)  # nothing is timed; one thread keeps small ops from stalling
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

OOM = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
print(f"out-of-memory class: {OOM.__name__}, "
      f"a RuntimeError: {issubclass(OOM, RuntimeError)}")

# On CUDA each activation is above 10 MiB, from where the caching allocator reserves
# memory in 2 MiB steps (not 20 MiB segments): its cap bites near the measured peak.
FEATURES, HIDDEN = {"cpu": (256, 1024), "cuda": (64, 32768)}[device.type]
START, SAMPLES, MAX_EPOCHS = 128, 8 * 128, 8
SIZES = [16, 32, 64, 128, 256]
dataset = TensorDataset(torch.randn(SAMPLES, FEATURES, device=device),  # [samples, in]
                        torch.randn(SAMPLES, 1, device=device))  # [samples, 1]
model = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(),
                            torch.nn.Linear(HIDDEN, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
loss_fn = torch.nn.MSELoss()
initial = {k: v.clone() for k, v in model.state_dict().items()}
param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}

# %%
# A memory limit on each device
# -----------------------------
# On CUDA the limit is real: ``set_per_process_memory_fraction`` caps the caching allocator,
# and an allocation past the cap raises ``torch.OutOfMemoryError``. It needs a device *index*
# (or ``torch.device("cuda", 0)``): a bare ``torch.device("cuda")`` raises the ``ValueError``
# this tip's earlier version crashed with on an H100. A CPU process has no such cap, so there
# a stand-in counts the bytes autograd saves for backward (exactly, through a pack hook with
# weak references) and raises ``torch.OutOfMemoryError`` mid-forward once they pass the
# limit, as the allocator would.


class _Saved:
    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor):
        self.tensor = tensor.detach()  # no grad_fn: no tensor -> graph -> wrapper cycle


class SavedBytesLimit:
    """CPU stand-in for a cap on the bytes saved for backward (parameters aside)."""

    def __init__(self, limit=float("inf")):
        self.limit, self.alive, self.peak = limit, [], 0

    def pack(self, tensor):
        saved = _Saved(tensor)
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in param_storages:
            self.alive = [r for r in self.alive if r[0]() is not None]
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
            self.alive.append((weakref.ref(saved), ptr, nbytes))
            total = sum({ptr: n for _, ptr, n in self.alive}.values())
            self.peak = max(self.peak, total)
            if total > self.limit:
                raise OOM(f"stand-in: {total} bytes saved, limit {self.limit}")
        return saved

    @staticmethod
    def unpack(saved):
        return saved.tensor


@contextlib.contextmanager
def memory_limit(limit=float("inf")):
    """Run the body under a cap of ``limit`` bytes above what is held now.

    Yields the CPU stand-in (whose ``peak`` is measured), or None on CUDA."""
    if device.type == "cuda":
        index = torch.cuda.current_device()
        opt.zero_grad(set_to_none=True)  # from no gradients, as the figures below
        torch.cuda.empty_cache()
        total = torch.cuda.get_device_properties(index).total_memory
        fraction = min(1.0, (torch.cuda.memory_reserved(index) + limit) / total)
        torch.cuda.set_per_process_memory_fraction(float(fraction), index)
        try:
            yield None
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0, index)
            torch.cuda.empty_cache()
    else:
        stand_in = SavedBytesLimit(limit)
        with torch.autograd.graph.saved_tensors_hooks(stand_in.pack, stand_in.unpack):
            yield stand_in


if torch.cuda.is_available():
    try:  # the earlier version's call, with the fraction that changes nothing
        torch.cuda.set_per_process_memory_fraction(1.0, torch.device("cuda"))
    except ValueError as err:
        print("set_per_process_memory_fraction(f, torch.device('cuda')) raises "
              f"ValueError:\n  {str(err).split(',')[0]}")


def first_batch(batch, data=dataset):
    """The first batch a DataLoader gives: fresh tensors, as in the loop."""
    return next(iter(DataLoader(data, batch_size=batch)))


def train_step(input, output):
    opt.zero_grad()
    pred = model(input)
    loss = loss_fn(output, pred)
    loss.backward()
    opt.step()


# %%
# Memory of one step against batch size
# -------------------------------------
# Measured per batch size: on CUDA the step's peak (``max_memory_allocated`` after
# ``reset_peak_memory_stats``, above what was allocated before the step, which starts
# without gradients); on the CPU the bytes saved for backward. The limit is set at 7/8 of
# the starting batch's figure, so the start is "slightly too large", as the article asks.
def step_memory(batch):
    input, output = first_batch(batch)
    opt.zero_grad(set_to_none=True)  # else zero_grad() frees them below the start
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        train_step(input, output)
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    with memory_limit() as stand_in:
        train_step(input, output)
    return stand_in.peak


train_step(*first_batch(SIZES[0]))  # first step: gradients, cuBLAS workspace
memory = [step_memory(b) for b in SIZES]
LIMIT = memory[SIZES.index(START)] * 7 // 8
model.load_state_dict(initial)
what = "peak allocated" if device.type == "cuda" else "saved for backward"
for b, m in zip(SIZES, memory):
    over = "  (over the limit)" if m > LIMIT else ""
    print(f"batch {b:4d}: {m / 2**20:8.3f} MiB {what}{over}")
print(f"limit: {LIMIT / 2**20:.3f} MiB above the step's start")

# %%
# Where the limit falls
# ---------------------
fig = plot_series({f"one training step ({what})": (SIZES, [m / 2**20 for m in memory])},
                  xlabel="batch size (samples)", ylabel=f"memory, {what} (MiB)",
                  title=f"Memory of one step (MLP {FEATURES}-{HIDDEN}-1) and the limit",
                  device=device, logx=True)
fig.axes[0].axhline(LIMIT / 2**20, color="0.2", linestyle="--", linewidth=1,
                    label="memory limit")
fig.axes[0].legend(fontsize=8)

# %%
# The anti-pattern: the article's loop, run as written
# ----------------------------------------------------
# Its loop, verbatim, in a function that takes ``dataset`` for the ``...`` it elides and
# hands ``training_loader`` and ``batch_size`` on from one epoch to the next. It runs epoch
# after epoch until an epoch trains without an out-of-memory error (at most 8). Hooks record
# the size of every batch the model sees and every optimizer step taken.
def article_epoch(dataset, training_loader, batch_size):
    for input, output in training_loader:
        try:
            opt.zero_grad()
            pred = model(input)
            loss = loss_fn(output, pred)
            loss.backward()
            opt.step()
        except RuntimeError:  # CUDA: Out of memory is a generic RTE
            batch_size -= 1
            training_loader = DataLoader(dataset, batch_size=batch_size)
    return training_loader, batch_size


def run_article_loop(data, epochs):
    loader, batch_size = DataLoader(data, batch_size=START), START
    seen, stepped = [], []
    hooks = [
        model.register_forward_pre_hook(lambda m, args: seen.append(len(args[0]))),
        opt.register_step_post_hook(lambda o, args, kwargs: stepped.append(seen[-1])),
    ]
    log = []
    try:
        for _ in range(epochs):
            loader_batch = loader.batch_size
            seen.clear()
            stepped.clear()
            with memory_limit(LIMIT):
                loader, batch_size = article_epoch(data, loader, batch_size)
            log.append({"loader batch": loader_batch, "batches": list(seen),
                        "trained": sum(stepped), "failed": len(seen) - len(stepped)})
            if log[-1]["failed"] == 0:
                break
    finally:
        for hook in hooks:
            hook.remove()
    return log, batch_size


model.load_state_dict(initial)
article_log, final_batch = run_article_loop(dataset, MAX_EPOCHS)
print(f"{'epoch':>5} {'loader batch':>12} {'sizes the model saw':>22} {'failed':>7} "
      f"{'samples trained':>16}")
for epoch, e in enumerate(article_log, 1):
    sizes = sorted(set(e["batches"]), reverse=True)
    print(f"{epoch:5d} {e['loader batch']:12d} {str(sizes)[:22]:>22} {e['failed']:7d} "
          f"{e['trained']:10d} / {SAMPLES}")
kept_size = all(b == START for b in article_log[0]["batches"][:SAMPLES // START])
reaches_fit = article_log[-1]["failed"] == 0
print(f"batch_size after the last epoch: {final_batch}")
print(f"every batch of the first epoch had the starting size: {kept_size}")

# %%
# The same loop hides a bug
# -------------------------
# ``except RuntimeError`` also swallows bugs: the same loop with one feature too few in the
# data (a shape error, not memory) quietly lowers ``batch_size`` and trains on nothing.
wrong_shape = TensorDataset(dataset.tensors[0][:, :-1], dataset.tensors[1])
bug_log, bug_batch = run_article_loop(wrong_shape, 1)
swallows = bug_log[0]["trained"] == 0 and bug_batch < START
print(f"shape bug: {bug_log[0]['failed']} failed batches, none reported, batch_size "
      f"{START} -> {bug_batch}")


# %%
# The fix: find the batch size first, catching only out-of-memory
# ---------------------------------------------------------------
# One forward and backward per candidate, bisecting between a size that fits and one that
# does not. The retry happens after the ``except`` block, so the exception (and the tensors
# its traceback holds) is gone before the next attempt allocates; any other error
# propagates. Then the epoch trains every batch at that size; an out-of-memory error there
# (not expected at a size that fitted) would be counted as skipped samples, not hidden.
def fits(batch, data=dataset):
    try:
        with memory_limit(LIMIT):
            input, output = first_batch(batch, data)
            loss_fn(output, model(input)).backward()
    except OOM:
        return False
    finally:
        opt.zero_grad(set_to_none=True)
    return True


def largest_batch(start):
    if fits(start):
        return start
    lo, hi = 0, start  # lo fits (0 trivially), hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    if lo == 0:
        raise RuntimeError("even a batch of 1 does not fit")
    return lo


model.load_state_dict(initial)
found = largest_batch(START)
trained = 0
with memory_limit(LIMIT):
    for input, output in DataLoader(dataset, batch_size=found):
        try:
            train_step(input, output)
            trained += len(input)
        except OOM:
            print(f"fix: a batch of {len(input)} ran out of memory")
        del input, output  # before the next batch is made, as when it was probed
print(f"fix: largest batch that fits {found}; "
      f"first epoch trained {trained} / {SAMPLES} samples")
try:
    fits(START, wrong_shape)
    bug_raised = False
except RuntimeError as err:
    bug_raised = True
    print(f"fix, shape bug: raises {type(err).__name__}:\n  {str(err).splitlines()[0]}")

# %%
# Check: the fix finds a batch, and does not hide the bug
# -------------------------------------------------------
assert found > 0 and bug_raised
if reaches_fit:
    print(f"the article's loop ended at batch {article_log[-1]['loader batch']}, "
          f"the fix found {found}")

# %%
# Verdict
# -------
# The article promises that the snippet adjusts the batch to one that fits. That is judged
# on two things it can do or not: whether it reaches a batch that fits at all (within 8
# epochs), and what that costs, the samples it skips in the first epoch beyond the fix's. If
# its smaller batch took effect at once (or the starting batch already fitted), it would skip
# none; keeping the old ``DataLoader``, it skips the rest of the epoch. That it also swallows
# a shape error is shown in the facts: a flaw of ``except RuntimeError`` that the fix
# avoids, not part of the claim that the loop finds a batch that fits.
RULE = ("wrong if the article's loop reaches no batch that fits within 8 epochs; holds "
        "if it reaches one and skips no more samples in the first epoch than the fix "
        "(its smaller batch takes effect at once); depends otherwise: it reaches one "
        "only after skipping samples that the fix trains")
skipped_samples = compare_values(
    "skipped in the first epoch",
    {"article's loop": [SAMPLES - article_log[0]["trained"]],
     "fix": [SAMPLES - trained]},
    threshold=0, device=device, metric="samples skipped", unit="samples",
    measure="difference")
facts = {"reaches a batch that fits": reaches_fit,
         "keeps the failing batch size for the rest of the epoch": kept_size,
         "swallows a shape error": swallows,
         "epochs until one trains without an error": len(article_log)}
decision = decide(device, [("wrong", {"reaches a batch that fits": False}),
                           ("holds", {"samples skipped": "none above"}),
                           ("depends", {})],
                  groups={"samples skipped": [skipped_samples]}, facts=facts,
                  key=skipped_samples)
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# Probing batch sizes by running out of memory is a start-up trick, not something to do every
# step: an out-of-memory error can leave the caching allocator fragmented, and in a multi-GPU
# job one rank retrying alone desynchronises the others. Measure the peak once
# (``max_memory_allocated``) and fix the batch, or keep the effective batch with gradient
# accumulation while shrinking the real one.

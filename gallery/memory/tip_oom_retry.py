"""
Retrying with a smaller batch after out-of-memory: catch the right exception
============================================================================

To find the largest batch that fits, the article catches the out-of-memory ``RuntimeError`` and
retries with a smaller batch, calling it (claim S4-1)

    "the following hacky snippet automatically adjusts the batch size to a level where it fits
    in memory."

The idea works: an allocation failure leaves PyTorch usable, so you can free what you hold and
try again. The catch is the ``except RuntimeError``: CUDA's out-of-memory error is a
``RuntimeError``, but so are shape mismatches, dtype errors and device mix-ups. A loop that halves
the batch on *any* ``RuntimeError`` turns a bug into a batch size of 0. The device-generic
``torch.OutOfMemoryError`` was exposed at the top level by pytorch/pytorch#121702 (merged April
2024, the 2.4 release cycle); ``torch.cuda.OutOfMemoryError`` (1.13+, pytorch/pytorch#83146) is the
same class, so the code below takes whichever name this torch has.
"""
# sphinx_gallery_tips_claims = ["S4-1"]
# sphinx_gallery_tips_tags = ["training", "cuda"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "1.13"
# sphinx_gallery_tips_takeaway = "Retry on torch.OutOfMemoryError only; a bare except RuntimeError turns shape bugs into a silent batch size of 0."
# sphinx_gallery_tips_keywords = ["out of memory", "OutOfMemoryError", "CUDA out of memory", "OOM", "batch size", "empty_cache", "retry"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.cuda.OutOfMemoryError.html", "https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory"]

# %%
# Setup
# -----
# ``OOM`` is the exception class to catch, whichever name this torch version offers.
import gc

import torch

torch.manual_seed(0)
torch.set_num_threads(min(2, torch.get_num_threads()))
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")

OOM = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
print("torch.OutOfMemoryError exists:", hasattr(torch, "OutOfMemoryError"))
print("torch.cuda.OutOfMemoryError is the same class:", torch.cuda.OutOfMemoryError is OOM)
print("subclass of RuntimeError:", issubclass(OOM, RuntimeError), "| MRO:",
      [c.__name__ for c in OOM.__mro__])
assert issubclass(OOM, RuntimeError)

# %%
# A training step with a memory budget
# ------------------------------------
# On CPU nothing runs out of memory politely, so this stand-in raises a real
# ``torch.OutOfMemoryError`` when a batch would need more than ``budget`` bytes. The model has a
# deliberate bug switch: ``in_features`` wrong by one, which raises a shape ``RuntimeError``.
FEATURES = 32
model = torch.nn.Linear(FEATURES, 8).to(device)


def train_step(batch_size, budget_bytes=1 << 20, features=FEATURES):
    x = torch.randn(batch_size, features, device=device)  # [batch, features]
    need = batch_size * 2048 * 4  # pretend each sample needs 2048 float32 activations
    if need > budget_bytes:
        raise OOM(f"stand-in: tried to allocate {need} bytes with a budget of {budget_bytes}")
    loss = model(x).square().mean()
    loss.backward()
    return loss.item()


# %%
# The anti-pattern: the article's retry loop, ``except RuntimeError``
# -------------------------------------------------------------------
# Written in the article's style: halve the batch on a ``RuntimeError`` until a step succeeds.


def find_batch_article(start, step):
    batch_size = start
    while batch_size > 0:
        try:
            step(batch_size)
            break
        except RuntimeError:  # meant for "CUDA out of memory", catches every RuntimeError
            batch_size //= 2
    return batch_size


# Real OOMs: the loop works and settles on the largest power-of-two fraction that fits.
article_ok = find_batch_article(512, train_step)
print("article loop, memory budget only -> batch size", article_ok)

# A bug, not memory: 31 features into a 32-feature layer. The loop hides it and returns 0.
article_bug = find_batch_article(512, lambda b: train_step(b, budget_bytes=1 << 40, features=FEATURES - 1))
print("article loop, shape bug -> batch size", article_bug, "(no error reached the user)")

# %%
# The fix: catch only out-of-memory, free memory outside the ``except`` block, then retry
# ----------------------------------------------------------------------------------------
# The retry happens after the ``except`` block has ended, so the exception (and the frames and
# tensors its traceback keeps alive) is gone before the next attempt allocates again.


def find_batch_fixed(start, step):
    batch_size = start
    while batch_size > 0:
        oom = False
        try:
            step(batch_size)
            return batch_size
        except OOM:
            oom = True  # anything else propagates
        if oom:
            model.zero_grad(set_to_none=True)
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()  # hand cached blocks back before the smaller retry
            batch_size //= 2
    raise RuntimeError("even a batch of 1 does not fit")


fixed_ok = find_batch_fixed(512, train_step)
print("fixed loop, memory budget only -> batch size", fixed_ok)
try:
    find_batch_fixed(512, lambda b: train_step(b, budget_bytes=1 << 40, features=FEATURES - 1))
    fixed_bug_raised = None
except RuntimeError as err:
    fixed_bug_raised = type(err).__name__ + ": " + str(err).splitlines()[0]
print("fixed loop, shape bug -> raised", fixed_bug_raised)

# %%
# Check
# -----
# Both loops find the same batch for a genuine memory limit; only the article's hides the bug.
assert article_ok == fixed_ok and fixed_ok > 0
assert fixed_bug_raised is not None and "OutOfMemory" not in fixed_bug_raised
fits = fixed_ok * 2048 * 4 <= (1 << 20) < 2 * fixed_ok * 2048 * 4
print("largest power-of-two batch that fits was found:", fits)

# %%
# A real out-of-memory error on CUDA
# ----------------------------------
# Cap this process at a small share of the GPU, let batches that need more fail for real, and
# let the fixed loop find a batch that fits. The cap is restored afterwards.
skipped = []
cuda_batch = None
if torch.cuda.is_available():
    total = torch.cuda.get_device_properties(device).total_memory
    budget = 2 << 30  # 2 GiB
    torch.cuda.set_per_process_memory_fraction(min(1.0, budget / total), device)
    per_sample = 64 << 20  # bytes of float32 activation per sample

    def cuda_step(batch_size):
        a = torch.empty(batch_size, per_sample // 4, device=device)  # [batch, 16M]
        b = a.mul(2)  # a second activation of the same size
        return b.shape

    try:
        torch.empty((4 * total) // 4, dtype=torch.float32, device=device)
    except OOM as err:
        print("a 4x-GPU-size allocation raised", type(err).__name__)
    cuda_batch = find_batch_fixed(256, cuda_step)
    torch.cuda.set_per_process_memory_fraction(1.0, device)
    torch.cuda.empty_cache()
    print(f"CUDA, 2 GiB cap, {per_sample >> 20} MiB x 2 per sample -> batch size {cuda_batch}")
else:
    msg = "real CUDA out-of-memory retry: needs CUDA (no CUDA device in this build)"
    print("Skipped:", msg)
    skipped.append(msg)

# %%
# Verdict
# -------
RULE = ("holds if the retry loop finds a fitting batch and the article's except RuntimeError does "
        "not hide an unrelated error; depends if it finds the batch but also turns a non-memory "
        "RuntimeError into a silent batch size of 0; wrong if it cannot find a fitting batch")
retry_works = article_ok > 0 and (cuda_batch is None or cuda_batch > 0)
hides_bugs = article_bug == 0
if not retry_works:
    verdict = "wrong"
elif hides_bugs:
    verdict = "depends"
else:
    verdict = "holds"
print(f"Verdict: {verdict}. Retry found batch {article_ok}; the article's loop on a shape bug "
      f"returned batch {article_bug}; catching {OOM.__name__} only let it raise: {fixed_bug_raised}.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": None,
    "measurements": [
        {"variant": "except RuntimeError, memory budget", "metric": "batch size found", "value": article_ok, "unit": "samples"},
        {"variant": "except RuntimeError, shape bug", "metric": "batch size found", "value": article_bug, "unit": "samples"},
        {"variant": "except torch.OutOfMemoryError, memory budget", "metric": "batch size found", "value": fixed_ok, "unit": "samples"},
    ] + ([{"variant": "CUDA, 2 GiB cap", "metric": "batch size found", "value": cuda_batch, "unit": "samples"}]
         if cuda_batch is not None else []),
    "skipped": skipped,
}

# %%
# When not to use it
# ------------------
# Probing batch sizes by crashing is a start-up trick, not something to run every step: an OOM
# can leave the caching allocator fragmented, and in multi-GPU jobs one rank retrying alone
# desynchronises the others. Measure the peak once (``torch.cuda.max_memory_allocated``) and fix
# the batch, or use gradient accumulation to keep the effective batch while shrinking the real one.

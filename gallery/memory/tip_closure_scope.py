"""
Loop variables outlive the loop; a function scope frees them
============================================================

The article's third tip (claim S4-3):

    "variables declared in loops and conditional statements linger around for the surrounding
    scope -- they go out-of-scope only after the function that they are in terminates. [...]
    To avoid keeping Tensors allocated after they are no longer needed, one may declare a
    closure."

followed by a training loop that wraps each batch in ``handle_batch()``, and the advice to call
``torch.cuda.synchronize()`` "before allocating more memory" because "the memory reserved by
the closure might not have been deallocated right after training halts".

Python frees a tensor when its last reference goes. A name bound inside a ``for`` loop keeps
the last batch's tensors referenced until the enclosing function returns, so whatever runs
after the loop (validation, say) runs with them still allocated. This tip runs the article's
closure (which raises a ``NameError`` as printed), measures the memory still held after the
loop at four batch sizes, and on CUDA tests whether ``synchronize()`` changes anything: whether
memory the closure freed while the GPU was still busy is counted, and reused by the next
batch, without it.
"""
# sphinx_gallery_tips_claims = ["S4-3"]
# sphinx_gallery_tips_tags = ["training", "memory-leak", "sync"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "Per-batch work in a function frees the batch's tensors when it returns; on CUDA, torch.cuda.synchronize() adds nothing to that."
# sphinx_gallery_tips_rules = ["PTT026"]
# sphinx_gallery_tips_keywords = ["closure", "scope", "out of memory", "torch.cuda.synchronize", "del", "caching allocator", "memory leak", "validation"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/notes/cuda.html#memory-management"]

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
# A two-layer MLP trained with SGD on a few random batches. On the CPU each step's tensors
# are registered with weak references, and "memory held" is the bytes of those still alive;
# ``input.to(device)`` returns the batch itself there, which the data list owns anyway, so
# only tensors the step creates count. On CUDA, ``memory_allocated`` counts them all.
import weakref

import torch

torch.manual_seed(0)
torch.set_num_threads(1)  # nothing is timed; one thread keeps small ops from stalling
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

WIDTH, STEPS = 512, 3
BATCHES = {"cpu": [64, 128, 256, 512], "cuda": [128, 256, 512, 1024]}[device.type]
model = torch.nn.Sequential(
    torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH)
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
loss_fn = torch.nn.MSELoss()
initial = {k: v.clone() for k, v in model.state_dict().items()}


def make_loader(batch):
    """CPU batches as from a DataLoader: [(input, target), ...], each [batch, width]"""
    gen = torch.Generator().manual_seed(batch)
    return [tuple(torch.randn(batch, WIDTH, generator=gen) for _ in range(2))
            for _ in range(STEPS)]


tracked = []


def track(**tensors):
    for name, t in tensors.items():
        tracked.append((name, weakref.ref(t), t.untyped_storage().data_ptr(),
                        t.untyped_storage().nbytes()))


def memory_now(loader):
    """Bytes held now: the allocator's count on CUDA, live step tensors on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.memory_allocated(device)
    data = {t.untyped_storage().data_ptr() for batch in loader for t in batch}
    alive = {ptr: n for _, ref, ptr, n in tracked
             if ref() is not None and ptr not in data}
    return sum(alive.values())


# %%
# The article's closure, verbatim
# -------------------------------
# It reads ``output.to(device)`` where the loop variable is ``target``: a ``NameError`` here,
# or, worse, silently the wrong tensor wherever some ``output`` happens to exist.
ARTICLE_CODE = """\
for input, target in dataloader:
    def handle_batch():
        x, y = input.to(device), output.to(device)
        pred = model(x)
        loss = loss_fn(pred, y)
        loss.backward()
        optimizer.step()

    handle_batch()
    # All of the variables defined above are now out of scope!
    # On CPU, they are already deallocated. On GPU, they will be deallocated soon.

# Make sure deallocation has taken place
if torch.cuda.is_available():
    torch.cuda.synchronize()
"""
namespace = {"torch": torch, "dataloader": make_loader(BATCHES[0]), "device": device,
             "model": model, "loss_fn": loss_fn, "optimizer": optimizer}
try:
    exec(ARTICLE_CODE, namespace)
except NameError as err:
    print(f"The article's closure raises {type(err).__name__}: {err}")
else:
    raise AssertionError("expected a NameError for `output`")


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# Both train one epoch and then reach the point where validation would start, where
# ``probe()`` reads the memory still held. The closure is the article's with ``target`` for
# ``output`` (and the ``zero_grad()`` its snippet leaves out).
def epoch_loop_scope(loader, probe):
    for input, target in loader:
        x, y = input.to(device), target.to(device)  # [batch, width] each
        optimizer.zero_grad()
        pred = model(x)
        loss = loss_fn(pred, y)
        loss.backward()
        optimizer.step()
        track(x=x, y=y, pred=pred, loss=loss)
    probe()  # x, y, pred and loss of the last batch are still bound here


def epoch_closure(loader, probe):
    for input, target in loader:
        def handle_batch():
            x, y = input.to(device), target.to(device)
            optimizer.zero_grad()
            pred = model(x)
            loss = loss_fn(pred, y)
            loss.backward()
            optimizer.step()
            track(x=x, y=y, pred=pred, loss=loss)

        handle_batch()
    probe()


EPOCHS = {"loop scope": epoch_loop_scope, "closure": epoch_closure}

# %%
# Check: the same training either way
# -----------------------------------
weights = {}
for name, epoch in EPOCHS.items():
    model.load_state_dict(initial)
    epoch(make_loader(BATCHES[0]), lambda: None)
    weights[name] = [p.detach().clone() for p in model.parameters()]
for a, b in zip(weights["loop scope"], weights["closure"]):
    torch.testing.assert_close(a, b, rtol=0, atol=0)
print("one epoch each way: identical weights")

# %%
# Measurement
# -----------
# Memory held when the epoch's loop is over, above what was held before the epoch, at each
# batch size. Both patterns leave the same gradients behind, so the difference between them
# is what the loop's names keep alive. (On the CPU, ``x`` and ``y`` are the loader's own
# batch and count for neither.)
held = {name: [] for name in EPOCHS}
lingering = {}
for batch in BATCHES:
    loader = make_loader(batch)
    for name, epoch in EPOCHS.items():
        model.load_state_dict(initial)
        optimizer.zero_grad(set_to_none=True)
        tracked.clear()
        base = memory_now(loader)
        seen = []

        def probe():
            seen.append(memory_now(loader) - base)
            if name == "loop scope":  # which of the step's names still hold a tensor
                lingering[batch] = {n: nbytes for n, ref, _, nbytes in tracked
                                    if ref() is not None}

        epoch(loader, probe)
        held[name].append(seen[0])

print(f"{'batch':>7}  {'loop scope':>12}  {'closure':>12}   memory held after the loop")
for b, loop, closure in zip(BATCHES, held["loop scope"], held["closure"]):
    print(f"{b:7d}  {loop / 2**10:8.1f} KiB  {closure / 2**10:8.1f} KiB")
print(f"still bound after the loop-scope epoch, batch {BATCHES[-1]} (storage bytes):")
print("  " + ", ".join(f"{n} {v / 2**10:.1f} KiB"
                       for n, v in sorted(lingering[BATCHES[-1]].items())))
# The 0-dim ``loss`` is no small thing: its storage is the reduction's whole buffer.

frees = [compare_values(f"held after the loop, batch {b}",
                        {"loop scope": [held["loop scope"][i] / 2**10],
                         "closure": [held["closure"][i] / 2**10]},
                        threshold=0, device=device, metric="memory held after the loop",
                        unit="KiB", x=b, measure="difference")
         for i, b in enumerate(BATCHES)]

# %%
# Does ``synchronize()`` change anything? (CUDA)
# ----------------------------------------------
# The GPU runs queued kernels after Python has moved on, so when ``handle_batch()`` returns
# its kernels may still be running. Two things ``synchronize()`` could change, measured once
# without it and once with it (the allocator is deterministic): the ``memory_allocated`` the
# closure leaves behind, and how much new memory the caching allocator must reserve for the
# next batch (nothing, if it reuses the blocks the closure freed). Either being larger
# without ``synchronize()`` would mean the article's call is needed. A queue of float32
# matmuls ahead of the closure keeps the GPU busy; ``query()`` on the stream records whether
# it still was.
skipped, sync_checks, facts = [], [], {}
if torch.cuda.is_available():
    busy_a = torch.randn(1024, 1024, device=device)  # [1024, 1024]: 4 MiB
    busy_out = torch.empty_like(busy_a)
    batch = [t.to(device) for t in make_loader(BATCHES[-1])[0]]

    def handle_batch(input, target):
        x, y = input.to(device), target.to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()

    def sync_round(sync):
        torch.cuda.synchronize(device)
        for _ in range(16):
            torch.matmul(busy_a, busy_a, out=busy_out)
        handle_batch(*batch)  # returns while the GPU may still run its kernels
        busy = not torch.cuda.current_stream(device).query()
        allocated = torch.cuda.memory_allocated(device)
        if sync:
            torch.cuda.synchronize(device)  # the article's call
        allocated_after = torch.cuda.memory_allocated(device)
        reserved = torch.cuda.memory_reserved(device)
        torch.cuda.reset_peak_memory_stats(device)
        handle_batch(*batch)  # the next batch
        growth = torch.cuda.max_memory_reserved(device) - reserved
        return busy, allocated, allocated_after, growth

    handle_batch(*batch)  # first use of this size: the allocator reserves blocks here
    rounds = {False: [], True: []}
    for sync in (False, True):
        rounds[sync].append(sync_round(sync))
    mib = {sync: [[v / 2**20 for v in r[1:]] for r in rounds[sync]] for sync in rounds}
    sync_checks = [
        compare_values("memory_allocated dropped by synchronize()",
                       {"before synchronize()": [a for a, _, _ in mib[True]],
                        "after synchronize()": [a for _, a, _ in mib[True]]},
                       threshold=0, device=device, metric="memory_allocated",
                       unit="MiB", measure="difference"),
        compare_values("next batch's new memory: no sync vs synchronize()",
                       {"no synchronize()": [g for *_, g in mib[False]],
                        "synchronize()": [g for *_, g in mib[True]]},
                       threshold=0, device=device, unit="MiB",
                       metric="memory reserved by next batch", measure="difference"),
    ]
    facts["GPU still busy when the closure returned"] = all(r[0] for r in rounds[False])
else:
    print("Skipped: the synchronize() checks need CUDA (no CUDA device in this build)")
    skipped.append("synchronize(): memory_allocated before and after it, and reuse of "
                   "the freed blocks: no CUDA device in this build")

# %%
# Memory held after the loop
# --------------------------
fig = plot_series({name: (BATCHES, [v / 2**10 for v in values])
                   for name, values in held.items()},
                  xlabel="batch size (samples)",
                  ylabel="memory held after the loop (KiB)",
                  title=f"Last batch's tensors after an epoch (MLP width {WIDTH})",
                  device=device, logx=True)

# %%
# Verdict
# -------
# The closure half: the loop scope holds more memory after the loop than the closure, at
# every batch size (exact counts). The ``synchronize()`` half, on CUDA only (the article
# calls it only there): ``synchronize()`` is needed if, without it, ``memory_allocated``
# stays higher or the next batch needs new memory in some round.
RULE = ("holds if, at every batch size, loop scope holds more memory after the loop "
        "than the closure, and on CUDA synchronize() lowers memory_allocated or "
        "saves the next batch new memory; wrong if the closure frees more at no size; "
        "depends otherwise (on CUDA: the closure frees the memory but synchronize() "
        "changes neither figure)")
groups = {"closure frees": frees}
if device.type == "cuda":
    groups["synchronize() frees more"] = sync_checks
    cases = [("wrong", {"closure frees": "none above"}),
             ("holds", {"closure frees": "all above",
                        "synchronize() frees more": "any above"}),
             ("depends", {})]
else:
    cases = [("holds", {"closure frees": "all above"}),
             ("wrong", {"closure frees": "none above"}),
             ("depends", {})]
decision = decide(device, cases, groups=groups, facts=facts, key=frees[-1])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": skipped}

# %%
# When not to use it
# ------------------
# A helper function (it need not be a closure) or a plain ``del x, y, pred, loss`` after the
# loop does the job; what matters is that no name still refers to the tensors. Inside the
# loop the saving is small: rebinding ``x = ...`` frees the old batch, and ``backward()`` has
# already freed the activations. Skip ``torch.cuda.synchronize()`` for this purpose: the
# caching allocator counts a block as free as soon as its tensor dies and hands it to later
# work on the same stream, which the stream runs in order; the call only stalls the CPU.
# ``torch.cuda.empty_cache()`` is a different thing again: it returns cached blocks to the
# driver (for other processes), and is not needed for PyTorch itself to reuse them.

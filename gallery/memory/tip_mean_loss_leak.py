"""
``mean_loss += loss`` keeps every step's graph
==============================================

The article warns of a subtle leak in a running mean of the loss (claim S4-2):

    "There's a subtle memory leak in the following code::

        mean_loss = 0
        for input, target in dataloader:
            # ...
            loss.backward()
            mean_loss += loss
        mean_loss /= len(dataloader)

    Since PyTorch 0.4, `loss` is a 0-dimensional `Tensor`, which means that the addition to
    `mean_loss` keeps around the gradient history of each `loss`."

``mean_loss + loss`` is itself an autograd op, so ``mean_loss`` becomes the root of a graph that
reaches back into every step. This tip runs the article's loop and counts exactly what stays
reachable from ``mean_loss`` afterwards: the graph nodes, and the bytes of the tensors autograd
saved for backward (tracked with ``torch.autograd.graph.saved_tensors_hooks`` and weak
references), against ``+= loss.item()`` and ``+= loss.detach()``.
"""
# sphinx_gallery_tips_claims = ["S4-2"]
# sphinx_gallery_tips_tags = ["autograd", "training", "memory-leak"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "Summing loss tensors chains every step's graph; backward already freed the big tensors, but a loop without backward keeps them all."
# sphinx_gallery_tips_keywords = ["memory leak", "out of memory", "loss.item()", "detach", "running loss", "grad_fn", "saved_tensors_hooks"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/autograd.html#hooks-for-saved-tensors"]

# %%
# Setup
# -----
# A small MLP trained on random batches. Every tensor autograd saves for backward passes
# through a pack hook that wraps it in a tiny object we hold only a weak reference to: when
# autograd drops the saved tensor (after backward, or when the graph dies), the weak reference
# dies with it, so "bytes still alive" is exact, not sampled. Weights are saved too, but they
# live anyway, so their storage is not counted.
import weakref

import torch

torch.manual_seed(0)
torch.set_num_threads(1)  # nothing here is timed; one thread keeps small ops from stalling on a busy machine
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")

WIDTH, BATCH = 128, 32


class _Saved:
    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor):
        # detach(): same storage, no grad_fn. Holding a saved *output* with its grad_fn would
        # make a cycle (tensor -> grad_fn -> saved wrapper -> tensor) that never frees.
        self.tensor = tensor.detach()


class SavedTensorTracker:
    """Counts the bytes of autograd-saved tensors that are still alive."""

    def __init__(self):
        self.records = []  # (weakref to the wrapper, storage address, storage bytes)

    def pack(self, tensor):
        saved = _Saved(tensor)
        storage = tensor.untyped_storage()
        self.records.append((weakref.ref(saved), storage.data_ptr(), storage.nbytes()))
        return saved

    @staticmethod
    def unpack(saved):
        return saved.tensor

    def alive_bytes(self, exclude=()):
        """Bytes of distinct storages still saved, not counting ``exclude`` (the parameters,
        which live anyway)."""
        alive = {ptr: n for ref, ptr, n in self.records if ref() is not None}
        return sum(n for ptr, n in alive.items() if ptr not in exclude)


def graph_nodes(value):
    """Number of autograd nodes reachable from ``value`` (0 for a float or a detached tensor)."""
    root = getattr(value, "grad_fn", None)
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack += [nxt for nxt, _ in node.next_functions]
    return len(seen)


model = torch.nn.Sequential(
    torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 1)
).to(device)
initial_state = {k: v.clone() for k, v in model.state_dict().items()}


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# One loop, three ways to accumulate. ``train=False`` is the same loop without ``backward``
# and ``step``: a validation loop someone forgot to wrap in ``torch.no_grad()``.
def run_epoch(accumulate, steps, train=True):
    model.load_state_dict(initial_state)
    gen = torch.Generator().manual_seed(1)
    tracker = SavedTensorTracker()
    mean_loss = 0
    with torch.autograd.graph.saved_tensors_hooks(tracker.pack, tracker.unpack):
        for _ in range(steps):
            inputs = torch.randn(BATCH, WIDTH, generator=gen).to(device)  # [batch, width]
            target = torch.randn(BATCH, 1, generator=gen).to(device)      # [batch, 1]
            loss = torch.nn.functional.mse_loss(model(inputs), target)
            if train:
                model.zero_grad()
                loss.backward()
                with torch.no_grad():  # a plain SGD step
                    for p in model.parameters():
                        p -= 1e-3 * p.grad
            if accumulate == "loss":      # the article's line
                mean_loss += loss
            elif accumulate == "detach":  # stays on the device, no sync, no graph
                mean_loss += loss.detach()
            else:                         # a Python float; on CUDA .item() waits for the GPU
                mean_loss += loss.item()
    del inputs, target, loss
    mean_loss /= steps
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return mean_loss, graph_nodes(mean_loss), tracker.alive_bytes(exclude=params)


# %%
# Check: the three give the same mean
# -----------------------------------
# They differ only in what they drag along, not in the number.
leaky, _, _ = run_epoch("loss", 5)
detached, _, _ = run_epoch("detach", 5)
as_float, _, _ = run_epoch("item", 5)
torch.testing.assert_close(leaky.item(), as_float)
torch.testing.assert_close(detached.item(), as_float)
print(f"mean loss over 5 steps: {as_float:.6f} (all three variants agree)")
print("mean_loss.grad_fn:", type(leaky.grad_fn).__name__, "| requires_grad:", leaky.requires_grad)
del leaky, detached

# %%
# Measurement
# -----------
# After N steps, with ``mean_loss`` still in scope: graph nodes reachable from it, and bytes of
# saved tensors still alive. The count is exact, so one run per setting is enough; two values
# of N show whether the figure grows with the number of steps.
STEPS = (5, 20)
LABEL = {"loss": "+= loss", "detach": "+= loss.detach()", "item": "+= loss.item()"}
rows = {}
for train in (True, False):
    for accumulate in ("loss", "detach", "item"):
        for steps in STEPS:
            _, nodes, alive = run_epoch(accumulate, steps, train=train)
            rows[train, accumulate, steps] = (nodes, alive)

print(f"{'loop':<22} {'accumulate':<18} " + "  ".join(f"{'N=' + str(n):>23}" for n in STEPS))
for (train, accumulate) in dict.fromkeys((t, a) for t, a, _ in rows):
    loop = "train (article)" if train else "no backward (eval)"
    cells = "  ".join(
        f"{rows[train, accumulate, n][0]:5d} nodes {rows[train, accumulate, n][1] / 2**10:7.1f} KiB"
        for n in STEPS
    )
    print(f"{loop:<22} {LABEL[accumulate]:<18} {cells}")

skipped = []
if torch.cuda.is_available():
    # On CUDA the same retained tensors show up in the allocator.
    cuda_growth = {}
    for accumulate in ("loss", "item"):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        kept = run_epoch(accumulate, STEPS[-1], train=False)
        torch.cuda.synchronize()
        cuda_growth[accumulate] = torch.cuda.memory_allocated() - before
        del kept
    print(f"CUDA memory held after {STEPS[-1]} eval steps: "
          + ", ".join(f"+= {a}: {b / 2**10:.1f} KiB" for a, b in cuda_growth.items()))
else:
    print("Skipped: CUDA allocator figures need CUDA (no CUDA device in this build)")
    skipped.append("CUDA memory_allocated growth: no CUDA device in this build")

# %%
# Verdict
# -------
# "Keeps around the gradient history" is true when the graph reachable from ``mean_loss`` grows
# with N. Whether that history still holds tensor memory depends on ``backward``: it frees the
# saved tensors of each step's graph, leaving the (small) node objects chained together.
RULE = ("holds if, in the article's training loop, both the graph nodes and the saved-tensor "
        "bytes kept by mean_loss grow with N while .item()/.detach() keep none; depends if "
        "only the node count grows there but saved bytes grow in a loop without backward; "
        "wrong if nothing grows")
lo, hi = STEPS
nodes_grow = rows[True, "loss", hi][0] > rows[True, "loss", lo][0] > 0
train_bytes_grow = rows[True, "loss", hi][1] > rows[True, "loss", lo][1] > 0
eval_bytes_grow = rows[False, "loss", hi][1] > rows[False, "loss", lo][1] > 0
fixes_clean = all(rows[t, a, n] == (0, 0) for t in (True, False) for a in ("detach", "item")
                  for n in STEPS)
if nodes_grow and train_bytes_grow and fixes_clean:
    verdict = "holds"
elif nodes_grow and eval_bytes_grow and fixes_clean:
    verdict = "depends"
elif not nodes_grow and not eval_bytes_grow:
    verdict = "wrong"
else:
    verdict = "depends"
per_step = (rows[False, "loss", hi][1] - rows[False, "loss", lo][1]) / (hi - lo)
print(f"Verdict: {verdict}. Training loop: {rows[True, 'loss', hi][0]} nodes and "
      f"{rows[True, 'loss', hi][1]} saved bytes kept after {hi} steps; without backward "
      f"{per_step / 2**10:.1f} KiB more per step.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": "saved bytes kept per step, loop without backward", "value": per_step / 2**10,
            "unit": "KiB"},
    "measurements": [
        {"variant": f"{'train' if t else 'no backward'}, {LABEL[a]}, N={n}", "metric": metric,
         "value": float(rows[t, a, n][i]), "unit": unit}
        for (t, a, n) in rows
        for i, metric, unit in ((0, "graph nodes kept", "nodes"), (1, "saved bytes kept", "B"))
    ],
    "skipped": skipped,
}

# %%
# When not to use it
# ------------------
# Accumulate ``loss.item()`` (a float) or ``loss.detach()``. On CUDA, ``.item()`` copies the
# value to the host and so waits for the GPU every step; ``mean_loss += loss.detach()`` keeps
# the sum on the device without a graph and without a sync, and you call ``.item()`` once at the
# end. Keep the tensor only when you really mean to backpropagate through the sum.

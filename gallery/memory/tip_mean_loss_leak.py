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

``mean_loss + loss`` is itself an autograd op, so ``mean_loss`` becomes the root of a graph
that reaches back into every step. This tip runs the article's loop for 1 to 32 steps and
measures what stays reachable from ``mean_loss``: the graph's nodes, and the memory of the
tensors they keep, against ``+= loss.item()`` and ``+= loss.detach()``. The same loop without
``backward()`` (a validation loop someone forgot to wrap in ``torch.no_grad()``) shows what
that history holds when nothing has freed it.
"""
# sphinx_gallery_tips_claims = ["S4-2"]
# sphinx_gallery_tips_tags = ["autograd", "training", "memory-leak"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "mean_loss += loss adds every step's graph to mean_loss. backward() frees its activations; a loop without backward keeps them all."
# sphinx_gallery_tips_rules = ["PTT012"]
# sphinx_gallery_tips_keywords = ["memory leak", "out of memory", "loss.item()", "detach", "running loss", "grad_fn", "saved_tensors_hooks"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/autograd.html#hooks-for-saved-tensors"]

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
# A small MLP trained on random batches, wider on a GPU so that each step's activations are
# far above the allocator's 512-byte granularity. On the CPU, every tensor autograd saves for
# backward passes through a pack hook that keeps only a weak reference to it: when autograd
# drops the saved tensor (after backward, or when the graph dies), the reference dies with
# it, so the bytes still alive are exact. On CUDA the allocator counts them.
import weakref

import torch

torch.manual_seed(0)
torch.set_num_threads(1)  # nothing is timed; one thread keeps small ops from stalling
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

WIDTH, BATCH = {"cpu": (128, 32), "cuda": (512, 128)}[device.type]
STEPS = [1, 8, 16, 24, 32]


class _Saved:
    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor):
        # detach(): same storage, no grad_fn. A saved *output* held with its grad_fn
        # would make a cycle (tensor -> grad_fn -> wrapper -> tensor) that never frees.
        self.tensor = tensor.detach()


class SavedTensors:
    """Remembers every tensor autograd saves; reports the bytes of those still alive."""

    def __init__(self):
        self.records = []  # (weak reference to the wrapper, storage address, bytes)

    def pack(self, tensor):
        saved = _Saved(tensor)
        storage = tensor.untyped_storage()
        self.records.append((weakref.ref(saved), storage.data_ptr(), storage.nbytes()))
        return saved

    @staticmethod
    def unpack(saved):
        return saved.tensor

    def alive_bytes(self, exclude=()):
        """Bytes of the distinct storages still saved, minus ``exclude``."""
        alive = {ptr: n for ref, ptr, n in self.records if ref() is not None}
        return sum(n for ptr, n in alive.items() if ptr not in exclude)


def graph_nodes(value):
    """Autograd nodes reachable from ``value`` (0 for a float or a detached tensor)."""
    seen, stack = set(), [getattr(value, "grad_fn", None)]
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
param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# One loop, three ways to accumulate. ``backward=False`` is the same loop without
# ``backward`` and ``step``. The memory kept is measured after the loop, with ``mean_loss``
# still in scope and the gradients dropped (they are not what the claim is about).
def run_epoch(accumulate, steps, backward=True):
    model.load_state_dict(initial_state)
    gen = torch.Generator().manual_seed(1)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
    tracker = SavedTensors()
    mean_loss = 0
    with torch.autograd.graph.saved_tensors_hooks(tracker.pack, tracker.unpack):
        for _ in range(steps):
            inputs = torch.randn(BATCH, WIDTH, generator=gen).to(device)  # [batch, in]
            target = torch.randn(BATCH, 1, generator=gen).to(device)  # [batch, 1]
            loss = torch.nn.functional.mse_loss(model(inputs), target)
            if backward:
                model.zero_grad(set_to_none=True)
                loss.backward()
                with torch.no_grad():  # a plain SGD step
                    for p in model.parameters():
                        p -= 1e-3 * p.grad
            if accumulate == "loss":  # the article's line
                mean_loss += loss
            elif accumulate == "detach":  # stays on the device: no sync, no graph
                mean_loss += loss.detach()
            else:  # a Python float; on CUDA .item() waits for the GPU
                mean_loss += loss.item()
    del inputs, target, loss
    mean_loss /= steps
    model.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        kept = torch.cuda.memory_allocated(device) - before
    else:
        kept = tracker.alive_bytes(exclude=param_storages)
    return mean_loss, graph_nodes(mean_loss), kept


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
print("mean_loss.grad_fn:", type(leaky.grad_fn).__name__,
      "| requires_grad:", leaky.requires_grad)
del leaky, detached

# %%
# Measurement
# -----------
# After N steps: the graph nodes reachable from ``mean_loss``, and the memory still held
# (CPU: bytes of saved tensors still alive; CUDA: ``memory_allocated`` above where the loop
# started). What is kept *per step* is the growth from one N to the next, divided by the
# steps in between: four rounds per comparison.
LABEL = {"loss": "+= loss", "detach": "+= loss.detach()", "item": "+= loss.item()"}
nodes, kept = {}, {}
for backward in (True, False):
    for accumulate in LABEL:
        for steps in STEPS:
            _, n, b = run_epoch(accumulate, steps, backward=backward)
            nodes[backward, accumulate, steps], kept[backward, accumulate, steps] = n, b

where = "saved tensors alive" if device.type == "cpu" else "memory_allocated growth"
first, last = STEPS[0], STEPS[-1]
print(f"memory kept ({where}) and graph nodes, after {first} -> {last} steps:")
for backward in (True, False):
    for accumulate in LABEL:
        loop = "train (article)" if backward else "no backward"
        key = (backward, accumulate)
        kib = [kept[(*key, n)] / 2**10 for n in (first, last)]
        memory = f"{kib[0]:7.1f} -> {kib[1]:7.1f}"
        graph = f"{nodes[(*key, first)]:4d} -> {nodes[(*key, last)]:4d}"
        print(f"  {loop:<16} {LABEL[accumulate]:<17} {memory} KiB  {graph} nodes")


def per_step(table, backward, accumulate):
    """Growth per step between consecutive step counts: one value per round."""
    ys = [table[backward, accumulate, n] for n in STEPS]
    return [(b - a) / (m - n) for a, b, n, m in zip(ys, ys[1:], STEPS, STEPS[1:])]


graph_growth = [
    compare_values(f"nodes per step: += loss vs {LABEL[fix]}",
                   {"+= loss": per_step(nodes, True, "loss"),
                    LABEL[fix]: per_step(nodes, True, fix)},
                   threshold=0, device=device, metric="graph nodes kept per step",
                   unit="nodes", measure="difference")
    for fix in ("item", "detach")
]
memory_growth = {
    backward: compare_values(
        f"memory/step, {'after' if backward else 'no'} backward: "
        f"+= loss vs .item()",
        {"+= loss": [v / 2**10 for v in per_step(kept, backward, "loss")],
         "+= loss.item()": [v / 2**10 for v in per_step(kept, backward, "item")]},
        threshold=0, device=device, metric="memory kept per step", unit="KiB",
        measure="difference")
    for backward in (True, False)
}

# %%
# What stays alive, step by step
# ------------------------------
# Memory kept after N steps for each pattern: the article's training loop, where each
# ``backward()`` frees what that step's graph saved, and the same loop without backward.
fig = plot_series(
    {f"{LABEL[a]}, no backward": (STEPS, [kept[False, a, n] / 2**10 for n in STEPS])
     for a in ("loss", "detach", "item")}
    | {"+= loss, after backward (article)":
       (STEPS, [kept[True, "loss", n] / 2**10 for n in STEPS])},
    xlabel="steps accumulated into mean_loss", ylabel="memory kept (KiB)",
    title=f"Memory kept alive by mean_loss (MLP width {WIDTH}, batch {BATCH})",
    device=device)

# %%
# The graph, step by step
# -----------------------
# In the article's loop the graph itself grows too: its nodes, reachable from ``mean_loss``.
fig = plot_series(
    {f"{LABEL[a]}, after backward": (STEPS, [nodes[True, a, n] for n in STEPS])
     for a in LABEL},
    xlabel="steps accumulated into mean_loss", ylabel="autograd nodes (count)",
    title="Graph reachable from mean_loss in the article's training loop",
    device=device)

# %%
# Verdict
# -------
# The claim is that the sum "keeps around the gradient history of each loss": the graph
# reachable from ``mean_loss`` grows with every step of the article's loop, while
# ``.item()`` and ``.detach()`` keep none. Node counts are exact, so their interval is
# their range over the four rounds. What that history holds in memory (nothing tensor-sized
# after ``backward()``, every activation without it) is measured above and shown, and decides
# nothing.
RULE = ("holds if, in the article's training loop, the graph reachable from mean_loss "
        "grows by more than 0 nodes per step with += loss compared with both "
        "+= loss.item() and += loss.detach(); wrong if against neither; "
        "depends otherwise")
decision = decide(device, [("holds", {"graph kept per step": "all above"}),
                           ("wrong", {"graph kept per step": "none above"}),
                           ("depends", {})],
                  groups={"graph kept per step": graph_growth,
                          "memory kept per step, after backward": [memory_growth[True]],
                          "memory kept per step, no backward": [memory_growth[False]]},
                  key=graph_growth[0])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# Accumulate ``loss.item()`` (a float) or ``loss.detach()``. On CUDA, ``.item()`` copies the
# value to the host and so waits for the GPU every step; ``mean_loss += loss.detach()`` keeps
# the sum on the device without a graph and without a sync, and you call ``.item()`` once at
# the end. In the article's loop the leak is the chain of graph nodes (small host objects):
# ``backward()`` has already freed the activations, as the memory figure shows. It becomes
# the out-of-memory error the article warns of where no ``backward()`` runs, as in a
# validation loop without ``torch.no_grad()``. Keep the tensor only when you really mean to
# backpropagate through the sum.

"""
Logged tensors without ``.detach()`` keep their graph
=====================================================

The article's fourth tip, "Don't forget to use ``.detach()``" (claim S0-4):

    "We often try to check different transformations of the validation outputs or the losses
    during our experiments. But, using them directly also carries on the gradient properties of
    these tensors around. On large-scale data, the GPU utilisation explodes because of this
    simple error. So, it’s better to use the .detach() method for objects that aren’t being used
    as feedback for the model."

A tensor that requires grad holds its ``grad_fn``, and through it the whole graph that made it,
including every tensor autograd saved for backward, until the tensor dies. Keep it in a list
for logging and that graph lives as long as the list. How much that costs depends on whether
``backward()`` already ran (it frees the saved tensors) or not (a validation loop run without
``torch.no_grad()``). This tip logs a transformation of the outputs for 1 to 32 steps, both
ways, and measures the memory the log keeps alive.
"""
# sphinx_gallery_tips_claims = ["S0-4"]
# sphinx_gallery_tips_tags = ["autograd", "tracking", "memory-leak"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "A logged output that still requires grad keeps its graph: after backward little more than itself, without backward every activation of every step."
# sphinx_gallery_tips_rules = ["PTT013"]
# sphinx_gallery_tips_keywords = ["detach", "memory leak", "out of memory", "logging", "loss.item()", "validation", "grad_fn", "saved_tensors_hooks"]

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
# A small classifier, wider on a GPU, fed random batches; ``forward`` runs one step, with or
# without backward. On the CPU every tensor autograd saves passes through a pack hook that
# wraps it in an object we only keep a weak reference to: a dead reference means autograd
# let the tensor go, so the bytes still alive are exact (parameters are saved too but live
# anyway, so they are left out). On CUDA the allocator counts them.
import weakref

import torch

torch.manual_seed(0)
torch.set_num_threads(1)  # nothing is timed; one thread keeps small ops from stalling
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

WIDTH, BATCH = {"cpu": (128, 32), "cuda": (256, 128)}[device.type]
CLASSES, STEPS = 10, [1, 8, 16, 24, 32]


class _Saved:
    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor):
        self.tensor = tensor.detach()  # no grad_fn: no tensor -> graph -> wrapper cycle


class SavedTensors:
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

    def alive(self):
        """{storage address: bytes} of the saved tensors still alive."""
        return {ptr: n for ref, ptr, n in self.records if ref() is not None}


def graph_nodes(tensors):
    seen, stack = set(), [t.grad_fn for t in tensors]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack += [nxt for nxt, _ in node.next_functions]
    return len(seen)


model = torch.nn.Sequential(
    torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
    torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
    torch.nn.Linear(WIDTH, CLASSES),
).to(device)
param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}


def batches(steps):
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(BATCH, WIDTH, generator=gen).to(device)  # [batch, width]
        y = torch.randint(CLASSES, (BATCH,), generator=gen).to(device)  # [batch]
        yield x, y


def forward(x, y, backward):
    logits = model(x)  # [batch, classes]
    loss = torch.nn.functional.cross_entropy(logits, y)
    if backward:
        model.zero_grad(set_to_none=True)
        loss.backward()
    return logits, loss


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# Each step logs its loss and ``softmax(logits)``, "a transformation of the outputs": as the
# tensors themselves (anti-pattern) or ``.detach()``-ed. ``backward=False`` is the same loop
# without backward: a validation loop without ``torch.no_grad()``.
def log_tensors(steps, backward):
    losses, outputs = [], []
    for x, y in batches(steps):
        logits, loss = forward(x, y, backward)
        losses.append(loss)
        outputs.append(logits.softmax(dim=-1))
    return losses, outputs


def log_detached(steps, backward):
    losses, outputs = [], []
    for x, y in batches(steps):
        logits, loss = forward(x, y, backward)
        losses.append(loss.detach())
        outputs.append(logits.softmax(dim=-1).detach())
    return losses, outputs


# The memory kept is measured after the loop, with the logs alive, gradients dropped.
def kept_by_logs(log, steps, backward):
    model.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
    tracker = SavedTensors()
    with torch.autograd.graph.saved_tensors_hooks(tracker.pack, tracker.unpack):
        losses, outputs = log(steps, backward)
    model.zero_grad(set_to_none=True)
    logged = losses + outputs
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        kept = torch.cuda.memory_allocated(device) - before
    else:
        # distinct storages: softmax saves its own output, the logged tensor itself
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                    for t in logged}
        saved = {p: n for p, n in tracker.alive().items() if p not in param_storages}
        kept = sum((saved | storages).values())
    return (losses, outputs), kept, graph_nodes(logged)


# %%
# Check: the logged numbers are the same
# --------------------------------------
(raw_loss, raw_out), _, _ = kept_by_logs(log_tensors, 4, backward=True)
(det_loss, det_out), _, _ = kept_by_logs(log_detached, 4, backward=True)
torch.testing.assert_close(torch.stack(raw_loss), torch.stack(det_loss))
torch.testing.assert_close(torch.stack(raw_out), torch.stack(det_out))
print("logged losses and softmax outputs: identical with and without .detach()")
print("requires_grad:", raw_out[0].requires_grad, "vs", det_out[0].requires_grad)
del raw_loss, raw_out, det_loss, det_out

# %%
# Measurement
# -----------
# Memory kept by the log after N steps (CPU: the logged tensors plus the saved tensors still
# alive; CUDA: ``memory_allocated`` above where the loop started), and the graph nodes it
# reaches.
LOOPS = {True: "after backward", False: "no backward"}
KEEP = {"tensor": "tensor", "detach": ".detach()"}
LOGS = {"tensor": log_tensors, "detach": log_detached}
kept, nodes = {}, {}
for backward in LOOPS:
    for keep in KEEP:
        for n in STEPS:
            _, kept[backward, keep, n], nodes[backward, keep, n] = kept_by_logs(
                LOGS[keep], n, backward)

first, last = STEPS[0], STEPS[-1]
print(f"memory kept by the log, {first} -> {last} steps (batch {BATCH}, "
      f"width {WIDTH}), and graph nodes after {last}:")
for backward, loop in LOOPS.items():
    for keep, label in KEEP.items():
        kib = [kept[backward, keep, n] / 2**10 for n in (first, last)]
        print(f"  {loop:<15} {label:<10} {kib[0]:8.1f} -> {kib[1]:8.1f} KiB   "
              f"{nodes[backward, keep, last]:4d} nodes")

# Per round (one step count), memory kept by logging the tensor / by logging .detach().
def kib(backward, keep):
    return [kept[backward, keep, n] / 2**10 for n in STEPS]


amplification = {
    backward: compare_values(f"memory kept, tensor / .detach(), {loop}",
                             {"tensor": kib(backward, "tensor"),
                              ".detach()": kib(backward, "detach")},
                             threshold=2, device=device, unit="KiB",
                             metric="memory kept by the log")
    for backward, loop in LOOPS.items()
}

# %%
# Memory kept against steps
# -------------------------
fig = plot_series({f"{KEEP[keep]}, {loop}": (STEPS, kib(backward, keep))
                   for backward, loop in LOOPS.items() for keep in KEEP},
                  xlabel="steps logged", ylabel="memory kept by the log (KiB)",
                  title=f"Logging softmax(logits): batch {BATCH}, width {WIDTH}",
                  device=device)

# %%
# Verdict
# -------
# "Explodes" means the log keeps far more than the values it logs: more than twice what the
# detached log keeps, at every step count. The article's setting spans both loops (the
# losses of training, the outputs of validation), so each is a group.
RULE = ("holds if logging the tensor keeps more than 2x the memory of logging "
        ".detach() at every step count both after backward and without backward; "
        "wrong if in neither loop; depends otherwise")
decision = decide(device, [("holds", {"after backward": "all above",
                                      "no backward": "all above"}),
                           ("wrong", {"after backward": "none above",
                                      "no backward": "none above"}),
                           ("depends", {})],
                  groups={"after backward": [amplification[True]],
                          "no backward": [amplification[False]]},
                  key=amplification[False])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# Log scalars with ``.item()`` (one host sync per call on CUDA) or accumulate ``.detach()``-ed
# tensors and convert once; log outputs with ``.detach()`` (and ``.cpu()`` if they should leave
# the GPU). Better still, run validation under ``torch.no_grad()`` or ``torch.inference_mode()``
# so no graph is built at all. After ``backward()`` an undetached output costs graph nodes and
# not much memory, as the figure shows; the explosion the article saw comes from graphs that
# were never backpropagated.

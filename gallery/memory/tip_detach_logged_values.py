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
``torch.no_grad()``). This tip keeps N logged values both ways and counts exactly what stays
alive.
"""
# sphinx_gallery_tips_claims = ["S0-4"]
# sphinx_gallery_tips_tags = ["autograd", "tracking", "memory-leak"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "A logged output that still requires grad keeps its graph; in a loop without backward that is every activation, N times over."
# sphinx_gallery_tips_keywords = ["detach", "memory leak", "out of memory", "logging", "loss.item()", "validation", "grad_fn", "saved_tensors_hooks"]

# %%
# Setup
# -----
# Every tensor autograd saves passes through a pack hook that wraps it in an object we only
# keep a weak reference to; a dead reference means autograd let the tensor go. Parameters are
# saved too but live anyway, so their storage is not counted.
import weakref

import torch

torch.manual_seed(0)
torch.set_num_threads(1)  # nothing here is timed; one thread keeps small ops from stalling on a busy machine
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")

WIDTH, BATCH, CLASSES, STEPS = 128, 32, 10, 10


class _Saved:
    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor):
        self.tensor = tensor.detach()  # no grad_fn: avoids a tensor -> graph -> wrapper cycle


class SavedTensorTracker:
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

    def alive_storages(self, exclude):
        """{storage address: bytes} of saved tensors still alive, minus ``exclude``."""
        alive = {ptr: n for ref, ptr, n in self.records if ref() is not None}
        return {ptr: n for ptr, n in alive.items() if ptr not in exclude}


def graph_nodes(tensors):
    seen, stack = set(), [t.grad_fn for t in tensors if torch.is_tensor(t)]
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


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# ``log`` decides what goes into the history list: the raw tensor (anti-pattern), or
# ``.detach()`` for tensors / ``.item()`` for scalars.
def run(what, keep, backward):
    gen = torch.Generator().manual_seed(1)
    tracker = SavedTensorTracker()
    history = []
    with torch.autograd.graph.saved_tensors_hooks(tracker.pack, tracker.unpack):
        for _ in range(STEPS):
            x = torch.randn(BATCH, WIDTH, generator=gen).to(device)            # [batch, width]
            y = torch.randint(CLASSES, (BATCH,), generator=gen).to(device)     # [batch]
            logits = model(x)                                                  # [batch, classes]
            loss = torch.nn.functional.cross_entropy(logits, y)
            if backward:
                model.zero_grad(set_to_none=True)
                loss.backward()
            value = loss if what == "loss" else logits.softmax(dim=-1)  # a "transformation"
            if keep == "raw":
                history.append(value)
            elif keep == "detach":
                history.append(value.detach())
            else:
                history.append(value.item())
    del x, y, logits, loss, value
    # Distinct storages: softmax saves its own output, which is the logged tensor itself.
    logged = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
              for t in history if torch.is_tensor(t)}
    extra = {ptr: n for ptr, n in tracker.alive_storages(param_storages).items() if ptr not in logged}
    return history, sum(logged.values()), sum(extra.values()), graph_nodes(history)


# %%
# Check: the logged numbers are the same
# --------------------------------------
raw, *_ = run("probs", "raw", backward=True)
det, *_ = run("probs", "detach", backward=True)
torch.testing.assert_close(torch.stack(raw), torch.stack(det))
print("logged softmax outputs: identical with and without .detach();",
      "requires_grad:", raw[0].requires_grad, "vs", det[0].requires_grad)
del raw, det

# %%
# Measurement
# -----------
# For each setting: the bytes of the logged values themselves, the bytes of other saved
# activations they keep alive, and the graph nodes reachable from the list, after N steps.
SETTINGS = {
    "train, log loss": ("loss", True, ("raw", "detach", "item")),
    "train, log softmax(logits)": ("probs", True, ("raw", "detach")),
    "eval without no_grad, log softmax(logits)": ("probs", False, ("raw", "detach")),
}
rows = {}
for setting, (what, backward, keeps) in SETTINGS.items():
    for keep in keeps:
        _, logged, saved, nodes = run(what, keep, backward)
        rows[setting, keep] = {"logged": logged, "saved": saved, "nodes": nodes}

print(f"after {STEPS} steps, batch {BATCH}, width {WIDTH}:")
print(f"{'setting':<43} {'kept as':<9} {'logged':>10} {'+ graph keeps':>14} {'nodes':>6}")
for (setting, keep), r in rows.items():
    label = {"raw": "tensor", "detach": ".detach()", "item": ".item()"}[keep]
    print(f"{setting:<43} {label:<9} {r['logged'] / 2**10:8.1f} KiB {r['saved'] / 2**10:10.1f} KiB "
          f"{r['nodes']:6d}")

skipped = []
if torch.cuda.is_available():
    growth = {}
    for keep in ("raw", "detach"):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        kept = run("probs", keep, backward=False)
        torch.cuda.synchronize()
        growth[keep] = torch.cuda.memory_allocated() - before
        del kept
    print("CUDA memory held by the eval history: "
          + ", ".join(f"{k}: {v / 2**10:.1f} KiB" for k, v in growth.items()))
else:
    print("Skipped: CUDA allocator figures need CUDA (no CUDA device in this build)")
    skipped.append("CUDA memory_allocated of the logged history: no CUDA device in this build")

# %%
# Verdict
# -------
# "Explodes" means the list keeps far more than the values it logs. Amplification = (logged +
# kept by the graph) / logged, for raw tensors; ``.detach()`` is 1 by construction.
RULE = ("holds if logging raw tensors keeps more than 2x the logged bytes alive both after "
        "backward and without it; depends if only one of the two settings does; wrong if "
        "neither does")


def amplification(setting):
    r = rows[setting, "raw"]
    return (r["logged"] + r["saved"]) / r["logged"]


amp = {setting: amplification(setting) for setting in SETTINGS}
train_amp = max(amp["train, log loss"], amp["train, log softmax(logits)"])
eval_amp = amp["eval without no_grad, log softmax(logits)"]
explodes = [train_amp > 2, eval_amp > 2]
assert all(rows[key]["saved"] == 0 and rows[key]["nodes"] == 0 for key in rows if key[1] != "raw")
verdict = "holds" if all(explodes) else "depends" if any(explodes) else "wrong"
print(f"Verdict: {verdict}. Raw tensors keep {train_amp:.1f}x their own bytes after backward, "
      f"{eval_amp:.1f}x in an eval loop without no_grad; .detach()/.item() keep no graph.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": "memory kept / logged bytes, eval loop without no_grad", "value": eval_amp, "unit": "x"},
    "measurements": [
        {"variant": f"{setting}, {keep}", "metric": "bytes kept alive (logged + graph)",
         "value": (r["logged"] + r["saved"]) / 2**10, "unit": "KiB"}
        for (setting, keep), r in rows.items()
    ],
    "skipped": skipped,
}

# %%
# When not to use it
# ------------------
# Log scalars with ``.item()`` (one host sync per call on CUDA) or accumulate ``.detach()``-ed
# tensors and convert once; log outputs with ``.detach()`` (and ``.cpu()`` if they should leave
# the GPU). Better still, run validation under ``torch.no_grad()`` or ``torch.inference_mode()``
# so no graph is built at all. After ``backward()`` an undetached loss costs only graph nodes,
# not activations, as the table shows; the explosion the article saw comes from graphs that
# were never backpropagated.

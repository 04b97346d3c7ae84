"""
Loading a checkpoint with ``mmap=True``, the ``meta`` device and ``assign=True``
================================================================================

The seed articles load checkpoints the classic way: build the model, ``torch.load`` the file,
``load_state_dict``. That holds two full copies of the weights in RAM at once. PyTorch's recipe
*Tips for Loading an nn.Module from a Checkpoint* recommends three changes:

    "The `mmap` keyword argument to `torch.load` attempts to solve the above two
    problems by using an `mmap` call on the checkpoint, so that tensor storages are
    memory-mapped and when they are fetched from disk to memory is managed by the OS."

    "In order to solve these two problems, we can use the `torch.device()`
    context manager with `device='meta'` when we instantiate the `nn.Module()`."

    "However, an in-place copy into a tensor on the ``meta`` device is a no-op.
    In order to avoid this, we can pass the `assign=True` keyword argument to
    ``load_state_dict()``."

This tip writes checkpoints of several sizes to a temporary folder and measures the process's
peak resident memory (Linux ``VmHWM``, reset before each load) while each way loads them.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["checkpoint"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "2.1"
# sphinx_gallery_tips_takeaway = "The classic load peaks at about two copies of the weights in RAM; mmap=True + a meta-device model + assign=True at almost none, at every size."
# sphinx_gallery_tips_statement = "mmap=True on torch.load, a model built under torch.device('meta') and load_state_dict(assign=True) make loading a checkpoint more memory efficient than the classic load."
# sphinx_gallery_tips_keywords = ["torch.load", "mmap", "meta device", "torch.device('meta')", "load_state_dict", "assign", "peak RSS", "VmHWM"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/module_load_state_dict_tips.html"]
# sphinx_gallery_tips_rules = ["PTT003"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). Each variant
# is measured in several rounds; a comparison pairs the rounds and takes the anti-pattern's
# value minus (or divided by) the recommended one's. The interval is a ~95% confidence
# interval for the median (with 5 rounds or fewer, their whole range). A verdict is the first
# case of the rule whose conditions the measurements meet.
from tipsite.tipkit import compare_values, decide, plot_series, report


# %%
# Setup
# -----
# A model of two square layers; the width sets the checkpoint's size. The recipe is about host
# memory, so everything stays on the CPU.
import ctypes
import ctypes.util
import os
import shutil
import statistics
import tempfile

import torch

torch.manual_seed(0)
device = torch.device("cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")
WIDTHS = [724, 1024, 1448, 2048]  # two layers of width^2 float32: 4 to 32 MiB
ROUNDS = 3
MiB = 2**20


class Model(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.a = torch.nn.Linear(width, width)
        self.b = torch.nn.Linear(width, width)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


workdir = tempfile.mkdtemp()
paths, file_mib = {}, {}
for width in WIDTHS:
    paths[width] = os.path.join(workdir, f"model_{width}.pt")
    torch.save(Model(width).state_dict(), paths[width])
    file_mib[width] = os.path.getsize(paths[width]) / MiB
    print(f"width {width}: checkpoint {file_mib[width]:5.1f} MiB")


# %%
# Measuring peak resident memory
# ------------------------------
# Writing ``5`` to ``/proc/self/clear_refs`` resets the peak (``VmHWM``) to the current resident
# size. The C allocator keeps freed memory for reuse, which would hide new allocations from
# the peak: ``malloc_trim`` hands it back to the system first.
libc = ctypes.CDLL(ctypes.util.find_library("c")) if os.name == "posix" else None


def host_bytes(field="VmRSS"):
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def host_peak_during(fn):
    """Peak resident memory above the start while ``fn`` runs, and what it returned."""
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
    with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
        fh.write("5")
    start = host_bytes()
    out = fn()
    return host_bytes("VmHWM") - start, out


try:
    host_peak_during(lambda: None)
    HOST_MEMORY = True
except OSError:  # not Linux, or /proc not writable
    HOST_MEMORY = False


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
def load_classic(path, width):
    model = Model(width)  # allocates and randomly initialises every weight...
    sd = torch.load(path, weights_only=True)  # ...then a second copy is read into RAM
    model.load_state_dict(sd)  # copied into the first
    return model


def load_mmap_meta(path, width):
    sd = torch.load(path, weights_only=True, mmap=True)  # maps the file, reads nothing
    with torch.device("meta"):
        model = Model(width)  # shapes only: no memory, no init kernels
    model.load_state_dict(sd, assign=True)  # the parameters *become* the mapped tensors
    return model


# %%
# Check: the same weights, the same outputs
# -----------------------------------------
# Reading the mapped weights pages the file in (page cache the OS may drop again).
width = WIDTHS[0]
model_m = load_mmap_meta(paths[width], width)
model_c = load_classic(paths[width], width)
saved = torch.load(paths[width], weights_only=True)
for k, v in saved.items():
    torch.testing.assert_close(model_m.state_dict()[k], v, rtol=0, atol=0)
    torch.testing.assert_close(model_c.state_dict()[k], v, rtol=0, atol=0)
print("both models hold exactly the saved weights; mmap model on:",
      next(model_m.parameters()).device)
x = torch.randn(2, width)  # [batch, features]
torch.testing.assert_close(model_m(x), model_c(x))
print("and compute the same outputs")
del model_m, model_c, saved

# %%
# Measurement
# -----------
# The peak increase of resident memory while each way loads, alternating, at every size.
# The recommended way goes first in every round, so nothing the classic way frees can be
# reused by it.
savings, mmap_share, skipped = [], [], []
if HOST_MEMORY:
    for width in WIDTHS:
        classic, mapped = [], []
        for _ in range(ROUNDS):
            mapped.append(host_peak_during(
                lambda: load_mmap_meta(paths[width], width))[0] / MiB)
            classic.append(host_peak_during(
                lambda: load_classic(paths[width], width))[0] / MiB)
        size = file_mib[width]
        savings.append(compare_values(
            f"peak saved by mmap+meta, {size:.0f} MiB checkpoint",
            {"classic load": classic, "mmap+meta+assign": mapped},
            threshold=0.5 * size, device=device, metric="peak RSS increase",
            unit="MiB", x=size, measure="difference"))
        mmap_share.append(compare_values(
            f"mmap+meta peak / checkpoint, {size:.0f} MiB checkpoint",
            {"mmap+meta+assign": mapped, "checkpoint file": [size] * ROUNDS},
            threshold=0.5, device=device, metric="peak RSS increase", unit="MiB",
            x=size))
        print(f"{size:5.1f} MiB checkpoint: peak RSS increase, classic "
              f"{statistics.median(classic):6.1f} MiB, mmap+meta+assign "
              f"{statistics.median(mapped):5.1f} MiB")
else:
    skipped.append("peak RSS: needs Linux /proc/self/clear_refs")
    print("Skipped: peak RSS needs Linux /proc/self/clear_refs")

# %%
# Where the memory goes
# ---------------------
# The peak increase of resident memory against the checkpoint's size, each way.
if savings:
    xs = [c["x"] for c in savings]
    fig = plot_series(
        {"classic: Model() + torch.load + load_state_dict":
             (xs, [statistics.median(c["base"]) for c in savings]),
         "mmap=True + meta + assign=True":
             (xs, [statistics.median(c["cand"]) for c in savings])},
        xlabel="checkpoint file size (MiB)", ylabel="peak RSS increase (MiB)",
        title="Host memory while loading a checkpoint", device=device)
    ax = fig.axes[0]
    ax.plot(xs, xs, color="0.4", linestyle="--", linewidth=1, label="= checkpoint size")
    ax.legend(fontsize=8)

# %%
# Verdict
# -------
# The classic way needs about two checkpoint sizes (fresh model + loaded copy); the recipe's
# way should need a small fraction of one.
RULE = ("holds if at every size mmap+meta+assign raises the peak RSS by more than half "
        "the checkpoint less than the classic load, and by less than half the "
        "checkpoint; wrong if it saves less than half the checkpoint at every size; "
        "depends otherwise")
if HOST_MEMORY:
    cases = [("holds", {"saved": "all above", "mmap peak / file": "all below"}),
             ("wrong", {"saved": "none above"}),
             ("depends", {})]
    groups = {"saved": savings, "mmap peak / file": mmap_share}
    decision = decide(device, cases, groups=groups, key=savings[-1])
    report(decision, RULE)
    verdicts = {device.type: decision}
else:
    verdicts = {}
shutil.rmtree(workdir)
RESULT = {"rule": RULE, "verdicts": verdicts, "measurements": [], "skipped": skipped}

# %%
# When not to use it
# ------------------
# A memory-mapped model reads its weights from disk on first use, so the first forward pass is
# slower on a cold disk; for a small model on a fast machine none of this matters. Keep the
# file in place while the model uses it, and create the optimizer *after* ``assign=True`` (it
# replaces the parameter objects). ``mmap`` needs the zipfile format (the default since 1.6).
# To move the model to a GPU, ``.to(device)`` after loading copies each weight once.

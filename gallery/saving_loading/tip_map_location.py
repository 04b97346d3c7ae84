"""
``map_location`` when loading, then ``del checkpoint``
======================================================

Two articles give one loading recipe. The first warns against loading a checkpoint and then
moving it (claim S0-6):

    "This essentially loads the model to a default device and then pushes it into the device
    mentioned in `.to(device)`. That's irritating when the default device is either missing or
    doesn't have enough memory in it."

The second gives the code, and frees the checkpoint afterwards (claim S1-3)::

    checkpoint = torch.load(save_path, map_location = device)
    model.load_state_dict(checkpoint['model'])
    optimizer.load_state_dict(checkpoint['optimizer'])
    del checkpoint

``torch.load`` restores every storage to the device it was saved from (its *location tag*,
the article's "default device") unless ``map_location`` names another one. This tip loads a
checkpoint written by a GPU training run onto the CPU, with and without ``map_location``, and
measures the memory loading needs: on a machine with a GPU, the GPU memory each way takes; on
one without, where only ``map_location`` can load it, the host's peak resident memory. Then it
resumes training the article's way and measures what ``del checkpoint`` gives back, for
checkpoints of several sizes.
"""
# sphinx_gallery_tips_claims = ["S0-6", "S1-3"]
# sphinx_gallery_tips_tags = ["checkpoint", "device"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "1.13"
# sphinx_gallery_tips_takeaway = "Without map_location a GPU checkpoint lands on its GPU first (no GPU: an error); del checkpoint then frees the weights' copy, not Adam's state."
# sphinx_gallery_tips_keywords = ["map_location", "torch.load", "del checkpoint", "weights_only", "load_state_dict", "location tag", "checkpoint memory", "peak memory"]
# sphinx_gallery_tips_errors = ["RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. If you are running on a CPU-only machine, please use torch.load with map_location=torch.device('cpu') to map your storages to the CPU."]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.load.html"]
# sphinx_gallery_tips_rules = ["PTT002"]

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
# MLPs of 512-wide layers (a GPU gets 1024-wide ones), trained one Adam step so that the
# checkpoint holds the weights and Adam's two moments per weight, like a real training
# checkpoint. The checkpoint is written on the CPU and its location tags are then rewritten to
# ``cuda:0``: the file a GPU run would have written, tags and all, on every machine.
import ctypes
import ctypes.util
import os
import statistics
import tempfile
import textwrap
import zipfile

import torch
from torch import nn

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

WIDTH = {"cpu": 512, "cuda": 1024}[device.type]
LAYERS = [1, 2, 4, 8]
ROUNDS = 3
MiB = 2**20
tmp = tempfile.mkdtemp()


def make_model(layers):
    return nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(layers)])


def write_gpu_checkpoint(layers):
    model = make_model(layers)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(8, WIDTH)).sum().backward()  # [8, WIDTH] -> scalar
    optimizer.step()  # fills Adam's state
    cpu_path = os.path.join(tmp, f"cpu_{layers}.pt")
    checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    torch.save(checkpoint, cpu_path)
    # the tag is a pickled string in data.pkl; 'cpu' -> 'cuda:0' (later tags reuse it)
    path = os.path.join(tmp, f"saved_on_cuda_{layers}.pt")
    with zipfile.ZipFile(cpu_path) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("data.pkl"):
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            dst.writestr(info, data)
    os.remove(cpu_path)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return path, model.state_dict(), weights


checkpoints = {layers: write_gpu_checkpoint(layers) for layers in LAYERS}
file_mib = {layers: os.path.getsize(c[0]) / MiB for layers, c in checkpoints.items()}
for layers, (_, _, weights) in checkpoints.items():
    print(f"{layers} layer(s): checkpoint {file_mib[layers]:6.1f} MiB, "
          f"of which model weights {weights / MiB:5.1f} MiB")


# %%
# Measuring host memory
# ---------------------
# Linux reports a process's resident memory (``VmRSS``) and its peak (``VmHWM``), and writing
# ``5`` to ``/proc/self/clear_refs`` resets the peak. The C allocator keeps freed memory for
# reuse, which would hide new allocations from the peak: ``malloc_trim`` hands it back first.
# (Tensors are freed as soon as the last reference goes: no garbage collection needed.)
libc = ctypes.CDLL(ctypes.util.find_library("c")) if os.name == "posix" else None


def release_freed():
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def host_bytes(field="VmRSS"):
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def host_peak_during(fn):
    """Peak resident memory above the start while ``fn`` runs, and what it returned."""
    release_freed()
    with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
        fh.write("5")
    start = host_bytes()
    out = fn()
    return host_bytes("VmHWM") - start, out


try:
    host_peak_during(lambda: None)
    HOST_MEMORY = True
except OSError:  # not Linux, or /proc not writable: the host figures are skipped
    HOST_MEMORY = False


def memory_in_use():
    """Bytes in use on ``device``: allocated GPU memory, or host resident memory."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    release_freed()
    return host_bytes()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The checkpoint was written by a GPU run; the target is the CPU (evaluation on a laptop, a
# CPU-only server, or a GPU too busy to hold a second copy).
target = torch.device("cpu")


def to_device(obj, where):
    if isinstance(obj, torch.Tensor):
        return obj.to(where)
    if isinstance(obj, dict):
        return {k: to_device(v, where) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, where) for v in obj)
    return obj


def load_then_move(path):  # anti-pattern
    checkpoint = torch.load(path, weights_only=True)  # to the saved device first
    return to_device(checkpoint, target)


def load_mapped(path):  # recommended
    return torch.load(path, map_location=target, weights_only=True)


# %%
# Check: where the storages go, and the same tensors either way
# -------------------------------------------------------------
path, reference, _ = checkpoints[LAYERS[0]]
mapped = load_mapped(path)
for k, v in reference.items():
    torch.testing.assert_close(mapped["model"][k], v, rtol=0, atol=0)
landed = sorted({t.device.type for t in mapped["model"].values()})
print("map_location=target: storages on", landed)
try:
    first = torch.load(path, weights_only=True)
except RuntimeError as err:
    without = type(err).__name__
    message = f"without map_location: {without}: {str(err).split('. ')[0]}."
    print(textwrap.fill(message, 88))
else:
    without = sorted({t.device.type for t in first["model"].values()})[0]
    print("without map_location: storages landed on", without, "first")
    moved = to_device(first, target)
    for k, v in mapped["model"].items():
        torch.testing.assert_close(moved["model"][k], v, rtol=0, atol=0)
    print("after .to(target): the same tensors as with map_location")
    del first, moved
del mapped

# %%
# The other ``torch.load`` default to know: ``weights_only``
# -----------------------------------------------------------
# Since torch 2.6 ``torch.load`` defaults to ``weights_only=True`` and refuses pickled objects
# other than tensors, containers and primitives (torch 2.4 and 2.5 load them with a
# FutureWarning). A checkpoint that pickles, say, an ``argparse.Namespace`` stops loading. This
# tip passes ``weights_only=True`` itself, so it behaves the same on every version.
import argparse
import pickle
import warnings

ns_path = os.path.join(tmp, "with_args.pt")
torch.save({"model": reference, "args": argparse.Namespace(lr=1e-3)}, ns_path)
try:
    # torch 2.4 and 2.5 warn of the coming change: caught and shown here
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.load(ns_path, map_location="cpu")  # the default weights_only
    print(f"torch {torch.__version__}: the default loaded the argparse.Namespace")
    for w in caught:
        print(f"    {w.category.__name__}: {str(w.message)[:70]}...")
except pickle.UnpicklingError as err:
    reason = next((ln for ln in str(err).splitlines() if "Unsupported global" in ln),
                  str(err).splitlines()[0])
    print(f"torch {torch.__version__}: the default refused it:")
    print(textwrap.fill(reason.strip().split(". ")[0] + ".", 88, initial_indent="    ",
                        subsequent_indent="    "))

# %%
# Measurement 1: memory while loading a GPU checkpoint onto the CPU
# -----------------------------------------------------------------
# With a GPU: the GPU memory each way needs on top of what was in use before (the peak), for
# the anti-pattern sends every storage to ``cuda:0`` first. Without one: the host's peak while
# ``map_location`` loads, against the file's size (a staged copy would double it).
peak_cmp, skipped = [], []
for layers, (path, _, _) in checkpoints.items():
    size = file_mib[layers]
    if device.type == "cuda":
        peaks = {"load, then .to('cpu')": [], "map_location='cpu'": []}
        for _ in range(ROUNDS):
            for name, fn in (("load, then .to('cpu')", load_then_move),
                             ("map_location='cpu'", load_mapped)):
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
                start = torch.cuda.memory_allocated(device)
                loaded = fn(path)
                torch.cuda.synchronize(device)
                peak = torch.cuda.max_memory_allocated(device) - start
                peaks[name].append(peak / MiB)
                del loaded
        peak_cmp.append(compare_values(
            f"GPU peak saved by map_location, {size:.0f} MiB checkpoint", peaks,
            threshold=0.5 * size, device=device, metric="GPU peak while loading",
            unit="MiB", x=size, measure="difference"))
    elif HOST_MEMORY:
        peaks = [host_peak_during(lambda: load_mapped(path))[0] / MiB
                 for _ in range(ROUNDS)]
        peak_cmp.append(compare_values(
            f"host peak / checkpoint, {size:.0f} MiB checkpoint",
            {"host peak, map_location='cpu'": peaks,
             "checkpoint file": [size] * ROUNDS},
            threshold=1.25, device=device, metric="host peak while loading", unit="MiB",
            x=size))
if device.type == "cpu":
    skipped.append("GPU peak of load-then-.to vs map_location: needs a GPU (without "
                   "one the load without map_location fails, shown above)")
if device.type == "cpu" and not HOST_MEMORY:
    skipped.append("host peak memory: needs Linux /proc/self/clear_refs")
    print("Skipped: host peak memory needs Linux /proc/self/clear_refs")

# %%
# Measurement 2: resume the article's way, then ``del checkpoint``
# -----------------------------------------------------------------
# ``load_state_dict`` *copies* the weights into the model's parameters, so the checkpoint's
# weights become a second, unused copy. ``Optimizer.load_state_dict`` instead keeps the loaded
# state tensors when their device and dtype already match, so those stay alive after ``del``.
# Memory in use on ``device`` is read once the checkpoint is loaded, and again after ``del``.


def resume(path, model, optimizer):
    checkpoint = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint


MEASURED = device.type == "cuda" or HOST_MEMORY
del_cmp, shares = [], []
for layers, (path, _, weights) in checkpoints.items():
    kept, after = [], []
    for _ in range(ROUNDS if MEASURED else 1):
        model = make_model(layers).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        checkpoint = resume(path, model, optimizer)
        mine = optimizer.state_dict()["state"][0]["exp_avg"].data_ptr()
        shares.append(mine == checkpoint["optimizer"]["state"][0]["exp_avg"].data_ptr())
        if MEASURED:
            kept.append(memory_in_use() / MiB)
        del checkpoint
        if MEASURED:
            after.append(memory_in_use() / MiB)
        del model, optimizer
    if MEASURED:
        del_cmp.append(compare_values(
            f"freed by del checkpoint, {file_mib[layers]:.0f} MiB checkpoint",
            {"checkpoint kept": kept, "after del checkpoint": after},
            threshold=0.5 * weights / MiB, device=device, metric="memory in use",
            unit="MiB", x=file_mib[layers], measure="difference"))
        print(f"{file_mib[layers]:5.1f} MiB checkpoint: del frees "
              f"{del_cmp[-1]['median']:5.1f} MiB; the model's weights are "
              f"{weights / MiB:5.1f} MiB")
print("the optimizer keeps the checkpoint's own state tensors:", all(shares))
if not MEASURED:
    skipped.append("memory freed by del checkpoint: needs Linux /proc")

# %%
# Where the memory goes
# ---------------------
# Memory against the checkpoint's size. Points on the dashed line equal the whole checkpoint.
if peak_cmp:
    xs = [c["x"] for c in peak_cmp]
    base = [statistics.median(c["base"]) for c in peak_cmp]
    cand = [statistics.median(c["cand"]) for c in peak_cmp]
    if device.type == "cuda":
        series = {"GPU peak, load then .to('cpu')": (xs, base),
                  "GPU peak, map_location='cpu'": (xs, cand)}
    else:
        series = {"host peak, map_location='cpu'": (xs, base)}
    series["freed by del checkpoint (resume)"] = (xs, [c["median"] for c in del_cmp])
    where = "GPU" if device.type == "cuda" else "host"
    fig = plot_series(series, xlabel="checkpoint file size (MiB)",
                      ylabel=f"{where} memory (MiB)",
                      title="Loading a checkpoint written on cuda:0", device=device)
    ax = fig.axes[0]
    ax.plot(xs, xs, color="0.4", linestyle="--", linewidth=1, label="= checkpoint size")
    ax.legend(fontsize=8)
    if device.type == "cpu":  # the anti-pattern has no points here: it fails
        ax.text(0.98, 0.04, f"load without map_location: {without}", ha="right",
                transform=ax.transAxes, fontsize=8)

# %%
# Verdict
# -------
# S0-6 holds where the anti-pattern needs the saved device: on a machine without a GPU the load
# fails, on one with a GPU the GPU holds the whole checkpoint (a peak at least half the
# checkpoint above ``map_location``'s), while ``map_location`` loads straight onto the CPU
# (host peak below 1.25x the file). S1-3 holds if ``del checkpoint`` frees at least half the
# model's weights at every size.
facts = {"load without map_location": without,
         "optimizer keeps the loaded state tensors": all(shares)}
if device.type == "cuda":
    RULE = ("holds if the anti-pattern's GPU peak is more than half the checkpoint "
            "above map_location's at every size and del checkpoint frees more than "
            "half the model's weights at every size; wrong if neither at any size; "
            "depends otherwise")
    cases = [("holds", {"GPU peak saved": "all above", "freed by del": "all above"}),
             ("wrong", {"GPU peak saved": "none above", "freed by del": "none above"}),
             ("depends", {})]
    groups = {"GPU peak saved": peak_cmp, "freed by del": del_cmp}
elif HOST_MEMORY:
    # Without a GPU the load without map_location always fails: S0-6 cannot be wrong
    # here, so neither can the verdict; the measurements decide holds or depends.
    RULE = ("holds if loading without map_location fails, the host peak with "
            "map_location stays below 1.25x the file at every size, and del checkpoint "
            "frees more than half the model's weights at every size; depends otherwise "
            "(no wrong case: without a GPU the load without map_location always fails)")
    cases = [("holds", {"load without map_location": "RuntimeError",
                        "host peak / file": "none above", "freed by del": "all above"}),
             ("depends", {})]
    groups = {"host peak / file": peak_cmp, "freed by del": del_cmp}
else:
    RULE = ("holds if loading without map_location fails (judges S0-6 only: del "
            "checkpoint is not measured without Linux /proc); depends otherwise")
    cases = [("holds", {"load without map_location": "RuntimeError"}), ("depends", {})]
    groups = {}
key = (peak_cmp or [None])[-1]
decision = decide(device, cases, groups=groups, facts=facts, key=key)
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": skipped}

import shutil

shutil.rmtree(tmp, ignore_errors=True)

# %%
# When not to use it
# ------------------
# On the machine and device that wrote the checkpoint, ``map_location`` changes nothing: the
# saved device is the target. Loading straight onto the GPU puts the checkpoint next to the
# model there until ``del checkpoint``; ``map_location="cpu"`` keeps that copy in host memory
# instead, and ``load_state_dict`` still copies the weights to the GPU. ``del`` frees only what
# nothing else holds: the optimizer keeps its loaded state (shown above), and a checkpoint loaded
# inside a function is freed when the function returns anyway. For checkpoints larger than
# memory see ``torch.load(..., mmap=True)`` with a ``meta``-device model.

"""
``map_location`` when loading, then ``del checkpoint``
======================================================

Two articles give one loading recipe. The first warns against loading a checkpoint and then
moving it (claim S0-6):

    "This essentially loads the model to a default device and then pushes it into the device
    mentioned in `.to(device)`. That's irritating when the default device is either missing or
    doesn't have enough memory in it."

The second gives the code, and adds that the checkpoint should be freed afterwards (claim
S1-3)::

    checkpoint = torch.load(save_path, map_location = device)
    model.load_state_dict(checkpoint['model'])
    optimizer.load_state_dict(checkpoint['optimizer'])
    del checkpoint

``torch.load`` first restores every storage to the device it was saved from (its *location
tag*); ``map_location`` rewrites that tag. This tip makes a checkpoint tagged ``cuda:0`` (so
the problem shows on a CPU-only machine), loads it with and without ``map_location``, and then
measures what the loaded checkpoint costs in memory and what ``del checkpoint`` gives back.
"""
# sphinx_gallery_tips_claims = ["S0-6", "S1-3"]
# sphinx_gallery_tips_tags = ["checkpoint", "device"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "1.0"
# sphinx_gallery_tips_takeaway = "map_location decides where storages land before any .to(); after load_state_dict the checkpoint is a full duplicate until deleted."
# sphinx_gallery_tips_keywords = ["map_location", "torch.load", "del checkpoint", "weights_only", "load_state_dict", "location tag", "checkpoint memory"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.load.html"]

# %%
# Setup
# -----
# A 4-layer MLP (about 4.2 M parameters, 16.8 MB) trained one Adam step, so the checkpoint
# holds the weights and two Adam moments per weight, like a real training checkpoint.
import gc
import os
import tempfile
import zipfile

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(min(2, torch.get_num_threads()))
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")


def make_model():
    return nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(4)])


model = make_model()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
model(torch.randn(8, 1024)).sum().backward()  # [8, 1024] -> scalar, just to fill Adam's state
optimizer.step()

tmp = tempfile.mkdtemp()
save_path = os.path.join(tmp, "checkpoint.pt")
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, save_path)
print(f"checkpoint file: {os.path.getsize(save_path) / 2**20:.1f} MiB")

# %%
# A checkpoint saved on ``cuda:0``, without a GPU
# -----------------------------------------------
# The location tag is a string in the checkpoint's ``data.pkl``. Rewriting ``'cpu'`` to
# ``'cuda:0'`` gives exactly the file a GPU run would have written, tags and all.
cuda_path = os.path.join(tmp, "saved_on_cuda.pt")
with zipfile.ZipFile(save_path) as src, zipfile.ZipFile(cuda_path, "w", zipfile.ZIP_STORED) as dst:
    for info in src.infolist():
        data = src.read(info)
        if info.filename.endswith("data.pkl"):
            data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
        dst.writestr(info, data)

# %%
# The anti-pattern: load, then ``.to(device)``
# --------------------------------------------
# Without ``map_location`` every storage goes first to its saved device. With no GPU there is
# no such device, so the load fails before any ``.to(device)`` could run.
checks = {}
try:
    loaded = torch.load(cuda_path, weights_only=True)  # ... and only then .to(device)
    landed = {t.device.type for t in loaded["model"].values()}
    print("loaded without map_location; storages landed on:", landed)
    checks["without map_location, storages go to the saved device first"] = landed == {"cuda"}
    del loaded
except RuntimeError as err:
    print("torch.load without map_location raises:\n   ", str(err).split(". ")[0] + ".")
    checks["without map_location, storages go to the saved device first"] = True

# %%
# The recommended pattern: ``map_location`` rewrites the tag
# ----------------------------------------------------------
# It takes a device (or string), a dict from saved tag to target, or a callable that sees each
# storage together with its saved tag. ``"meta"`` is a device too: shapes, no data.
seen_tags = []


def to_cpu(storage, location):
    seen_tags.append(location)
    return storage  # already deserialised on the CPU; returning it keeps it there


variants = {
    "map_location=device": device,
    "map_location={'cuda:0': 'cpu'}": {"cuda:0": "cpu"},
    "map_location=callable": to_cpu,
    "map_location='meta'": "meta",
}
reference = model.state_dict()
for name, where in variants.items():
    ckpt = torch.load(cuda_path, map_location=where, weights_only=True)
    devs = sorted({t.device.type for t in ckpt["model"].values()})
    print(f"{name:34s} -> storages on {devs}")
    if devs != ["meta"]:
        for k, v in ckpt["model"].items():
            torch.testing.assert_close(v.to("cpu"), reference[k], rtol=0, atol=0)
print("location tags the callable saw:", sorted(set(seen_tags)))
checks["map_location puts storages on the target device"] = devs == ["meta"] and set(seen_tags) == {"cuda:0"}
del ckpt

# %%
# ``weights_only``: the other ``torch.load`` default to know
# ----------------------------------------------------------
# Since torch 2.6 ``torch.load`` defaults to ``weights_only=True``: it unpickles tensors,
# containers and primitives only, and refuses arbitrary objects. Training checkpoints that
# pickle, say, an ``argparse.Namespace`` of hyper-parameters stop loading. This tip passes
# ``weights_only=True`` explicitly so it behaves the same on every version.
import argparse
import pickle

ns_path = os.path.join(tmp, "with_args.pt")
torch.save({"model": model.state_dict(), "args": argparse.Namespace(lr=1e-3)}, ns_path)
import warnings

try:
    with warnings.catch_warnings(record=True) as caught:  # torch 2.4-2.5 warn about the coming flip
        warnings.simplefilter("always")
        torch.load(ns_path, map_location="cpu")  # default weights_only
    print(f"torch {torch.__version__}: the default loaded an argparse.Namespace (weights_only default False)")
    for w in caught:
        print(f"    {w.category.__name__}: {str(w.message)[:100]}...")
except pickle.UnpicklingError as err:
    reason = next((ln for ln in str(err).splitlines() if "Unsupported global" in ln),
                  str(err).splitlines()[0])
    print(f"torch {torch.__version__}: the default refused it (weights_only default True):\n   ",
          reason.strip().split(". ")[0] + ".")
print("expected default for this version:", "True" if TORCH >= (2, 6) else "False")

# %%
# Measurement: what a loaded checkpoint costs, and what ``del`` frees
# -------------------------------------------------------------------
# ``load_state_dict`` *copies* into the model's existing parameters, so after it the
# checkpoint's model tensors are a second, unused copy. The optimizer is different:
# ``Optimizer.load_state_dict`` keeps the loaded state tensors when device and dtype already
# match, so those stay alive after ``del checkpoint`` anyway. Bytes are counted exactly, per
# storage (data pointers tell who shares what), and the process's resident memory (Linux
# ``VmRSS``, peak ``VmHWM`` reset through ``/proc/self/clear_refs``) is read alongside.


def proc_kib(field):
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def storages(obj):
    """{data_ptr: nbytes} of every tensor storage reachable in a nested checkpoint."""
    found = {}
    if isinstance(obj, torch.Tensor):
        s = obj.untyped_storage()
        found[s.data_ptr()] = s.nbytes()
    elif isinstance(obj, dict):
        for v in obj.values():
            found.update(storages(v))
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            found.update(storages(v))
    return found


model = make_model().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
gc.collect()
rss_measured = reset_peak() and proc_kib("VmRSS") is not None
base = proc_kib("VmRSS")

checkpoint = torch.load(save_path, map_location=device, weights_only=True)
model.load_state_dict(checkpoint["model"])
optimizer.load_state_dict(checkpoint["optimizer"])

ckpt_bytes = storages(checkpoint)
live = storages({"p": list(model.parameters()), "o": optimizer.state_dict()["state"]})
model_part = storages(checkpoint["model"])
shared = {p: n for p, n in ckpt_bytes.items() if p in live}
freed_exact = sum(n for p, n in ckpt_bytes.items() if p not in live)
print(f"checkpoint tensors:                  {sum(ckpt_bytes.values()) / 2**20:6.1f} MiB")
print(f"  model part shared with parameters: {sum(n for p, n in model_part.items() if p in live) / 2**20:6.1f} MiB")
print(f"  shared with the optimizer state:   {sum(shared.values()) / 2**20:6.1f} MiB")
print(f"  referenced only by the checkpoint: {freed_exact / 2**20:6.1f} MiB  <- what del frees")

if rss_measured:
    after_load, peak = proc_kib("VmRSS"), proc_kib("VmHWM")
del checkpoint
gc.collect()
if rss_measured:
    # glibc keeps freed heap pages for reuse; malloc_trim hands them back so VmRSS shows them.
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)
    except (OSError, AttributeError):
        pass
    after_del = proc_kib("VmRSS")
    rss = {"peak during load": (peak - base) / 1024, "after load_state_dict": (after_load - base) / 1024,
           "after del checkpoint": (after_del - base) / 1024}
    for k, v in rss.items():
        print(f"resident memory above baseline, {k:22s}: {v:6.1f} MiB")
    print(f"resident memory returned by del:  {rss['after load_state_dict'] - rss['after del checkpoint']:6.1f} MiB"
          " (after malloc_trim; allocators may keep freed pages, so RSS can undercount)")
else:
    rss = {}
    print("Skipped: resident-memory readings need Linux /proc (exact byte counts above still hold)")

# %%
# On CUDA: ``map_location="cuda"`` versus loading on the CPU first
# ----------------------------------------------------------------
# Loading straight to the GPU puts the checkpoint's copy in GPU memory next to the model;
# loading to the CPU and letting ``load_state_dict`` copy keeps the GPU peak at one copy.
skipped, cuda_peaks = [], {}
if torch.cuda.is_available():
    for where in ("cuda", "cpu"):
        m = make_model().to("cuda")
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        ck = torch.load(save_path, map_location=where, weights_only=True)
        m.load_state_dict(ck["model"])
        torch.cuda.synchronize()
        cuda_peaks[where] = (torch.cuda.max_memory_allocated() - start) / 2**20
        del ck, m
        torch.cuda.empty_cache()
        print(f"GPU peak above the model, map_location={where!r}: {cuda_peaks[where]:.1f} MiB")
else:
    skipped.append("GPU peak memory of map_location='cuda' vs 'cpu': needs CUDA (no CUDA device in this build)")
    print("Skipped: GPU peak memory comparison needs CUDA (no CUDA device in this build)")

# %%
# Verdict
# -------
checks["del checkpoint frees a duplicate of the weights"] = freed_exact > 0 and \
    freed_exact >= sum(model_part.values())
for name, ok in checks.items():
    print(f"  {'yes' if ok else 'NO '}  {name}")
RULE = ("holds if every check passes: a checkpoint saved on cuda:0 cannot be loaded without "
        "map_location here (or lands on the saved device first), map_location places the "
        "storages on the target device, and after load_state_dict the checkpoint still holds "
        "at least the model's bytes (counted per storage) that only del frees; wrong if none pass; "
        "depends otherwise")
passed = sum(checks.values())
verdict = "holds" if passed == len(checks) else ("wrong" if passed == 0 else "depends")
print(f"Verdict: {verdict}. {passed}/{len(checks)} checks pass; del frees "
      f"{freed_exact / 2**20:.1f} MiB of {sum(ckpt_bytes.values()) / 2**20:.1f} MiB loaded.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": "bytes freed by del checkpoint", "value": freed_exact / 2**20, "unit": "MiB"},
    "measurements": [
        {"variant": "loaded checkpoint", "metric": "tensor bytes", "value": sum(ckpt_bytes.values()) / 2**20,
         "unit": "MiB"},
        {"variant": "del checkpoint", "metric": "bytes freed (exact)", "value": freed_exact / 2**20, "unit": "MiB"},
        {"variant": "optimizer state", "metric": "bytes still shared after del", "value": sum(shared.values()) / 2**20,
         "unit": "MiB"},
    ] + [{"variant": "process", "metric": f"resident memory {k}", "value": v, "unit": "MiB"} for k, v in rss.items()]
      + [{"variant": f"map_location={k!r}", "metric": "GPU peak above model", "value": v, "unit": "MiB"}
         for k, v in cuda_peaks.items()],
    "skipped": skipped,
}

import shutil

shutil.rmtree(tmp, ignore_errors=True)  # the temporary files are not needed any more

# %%
# When not to use it
# ------------------
# ``del checkpoint`` only helps if nothing else holds the tensors: the optimizer keeps its
# loaded state (shown above), and a checkpoint returned from a function dies with the function
# anyway. For checkpoints larger than memory, ``torch.load(..., mmap=True)`` (torch 2.1+) or
# building the model on the ``meta`` device and ``load_state_dict(..., assign=True)`` avoid the
# second copy altogether.

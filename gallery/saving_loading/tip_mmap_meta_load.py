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

This tip writes a 128 MiB checkpoint to a temporary folder and measures the process's peak
resident memory (Linux ``VmHWM``, reset before each variant) while each way loads it.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["checkpoint"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "2.1"
# sphinx_gallery_tips_takeaway = "torch.load(mmap=True) + a meta-device model + load_state_dict(assign=True) loads without a second copy of the weights in RAM."
# sphinx_gallery_tips_keywords = ["torch.load", "mmap", "meta device", "torch.device('meta')", "load_state_dict", "assign", "peak RSS", "VmHWM"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/module_load_state_dict_tips.html"]

# %%
# Setup
# -----
# Two 4096x4096 float32 layers: 2 x 64 MiB. Each weight is larger than glibc's largest
# mmap threshold (32 MiB), so its memory goes back to the OS when freed and resident memory
# tracks what is alive.
import os
import platform
import shutil
import tempfile

import torch

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")


class Model(torch.nn.Module):
    def __init__(self, width=4096):
        super().__init__()
        self.a = torch.nn.Linear(width, width)
        self.b = torch.nn.Linear(width, width)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


workdir = tempfile.mkdtemp()
path = os.path.join(workdir, "model.pt")
reference = Model()
torch.save(reference.state_dict(), path)
file_mib = os.path.getsize(path) / 2**20
print(f"checkpoint: {file_mib:.0f} MiB")
reference_sd = {k: v.clone() for k, v in reference.state_dict().items()}  # kept for the check
del reference


# %%
# Peak resident memory
# --------------------
# Writing ``5`` to ``/proc/self/clear_refs`` resets the peak (``VmHWM``) to the current resident
# size; the increase of the peak over that is what a variant needed at most.
def _status_kib(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def peak_rss_increase_mib(fn):
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    start = _status_kib("VmRSS")
    out = fn()
    return (_status_kib("VmHWM") - start) / 1024, out


try:
    peak_rss_increase_mib(lambda: None)
    can_measure = platform.system() == "Linux"
except OSError:
    can_measure = False


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
def load_classic():
    model = Model()  # allocates and randomly initialises every weight...
    sd = torch.load(path, weights_only=True)  # ...then a second full copy is read into RAM
    model.load_state_dict(sd)  # copied into the first
    return model


def load_mmap_meta():
    sd = torch.load(path, weights_only=True, mmap=True)  # storages map the file, nothing read yet
    with torch.device("meta"):
        model = Model()  # shapes only, no memory, no init kernels
    model.load_state_dict(sd, assign=True)  # the parameters *become* the mapped tensors
    return model


# %%
# Measurement and check
# ---------------------
# The recommended way is measured first, so nothing the classic way frees can be reused by it.
measurements, skipped = [], []
if can_measure:
    mmap_mib, model_m = peak_rss_increase_mib(load_mmap_meta)
    classic_mib, model_c = peak_rss_increase_mib(load_classic)
else:
    model_m, model_c = load_mmap_meta(), load_classic()
    skipped.append("peak RSS: needs Linux /proc/self/clear_refs")
    print("Skipped: peak RSS needs Linux /proc/self/clear_refs")

# Reading the weights now pages the mapped file in (page cache the OS may drop again).
for k, v in reference_sd.items():
    torch.testing.assert_close(model_m.state_dict()[k], v, rtol=0, atol=0)
    torch.testing.assert_close(model_c.state_dict()[k], v, rtol=0, atol=0)
print("both models hold exactly the saved weights; mmap model on:",
      next(model_m.parameters()).device)
x = torch.randn(2, 4096)  # [batch, features]
torch.testing.assert_close(model_m(x), model_c(x))
print("and compute the same outputs")

# %%
# Verdict
# -------
# The classic way needs about two checkpoint sizes (fresh model + loaded copy); the recommended
# way should need a small fraction of one. It holds if its peak increase is below half of the
# classic way's and below half the checkpoint size.
RULE = ("holds if the mmap+meta+assign peak RSS increase is below 0.5x the classic load's and below "
        "0.5x the checkpoint size; wrong if it is above 0.9x the classic load's; depends otherwise")
if can_measure:
    print(f"peak RSS increase, classic load:      {classic_mib:7.1f} MiB")
    print(f"peak RSS increase, mmap+meta+assign:  {mmap_mib:7.1f} MiB   (checkpoint {file_mib:.0f} MiB)")
    if mmap_mib < 0.5 * classic_mib and mmap_mib < 0.5 * file_mib:
        verdict = "holds"
    elif mmap_mib > 0.9 * classic_mib:
        verdict = "wrong"
    else:
        verdict = "depends"
    measurements = [
        {"variant": "classic: Model() + torch.load + load_state_dict", "metric": "peak RSS increase",
         "unit": "MiB", "value": classic_mib},
        {"variant": "mmap=True + meta + assign=True", "metric": "peak RSS increase",
         "unit": "MiB", "value": mmap_mib},
    ]
    key = {"name": "peak RSS increase, classic / mmap+meta", "unit": "MiB saved",
           "value": classic_mib - mmap_mib}
    print(f"Verdict: {verdict}. Loading a {file_mib:.0f} MiB checkpoint raised peak RSS by "
          f"{classic_mib:.0f} MiB the classic way and {mmap_mib:.0f} MiB with mmap+meta+assign.")
else:
    verdict, key = "depends", None
    print("Verdict: depends. Peak memory could not be measured on this platform.")
print(f"Rule: {RULE}")
del model_m, model_c
shutil.rmtree(workdir)

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": key,
    "measurements": measurements,
    "skipped": skipped,
}

# %%
# When not to use it
# ------------------
# A memory-mapped model reads its weights from disk on first use, so the first forward pass is
# slower on a cold disk; for a small model on a fast machine none of this matters. Keep the
# file in place while the model uses it, and create the optimizer *after* ``assign=True`` (it
# replaces the parameter objects). ``mmap`` needs the zipfile format (the default since 1.6).

"""
``torch.cuda.memory_allocated`` only sees CUDA memory
=====================================================

The article's first tip, "Memory usage" (claim S1-1), is one call::

    torch.cuda.memory_allocated(device)

"We can add this command for each iteration, after forward pass, and so on", for example::

    print("Begin: {}".format(torch.cuda.memory_allocated(device)))
    model.to(device)
    print("1 - After model to device: {}".format(torch.cuda.memory_allocated(device)))

It reports the bytes held by tensors in PyTorch's CUDA caching allocator. That is the right
number on a GPU. On a CPU it raises no error and prints a number, which makes it easy to trust:
this tip runs the article's snippet on the build's device, compares it with what the process
really allocated (``torch.profiler`` with ``profile_memory=True``, and the resident set size),
and shows the per-device tools that do measure.
"""
# sphinx_gallery_tips_claims = ["S1-1"]
# sphinx_gallery_tips_tags = ["tracking", "cuda", "device"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "0.4"
# sphinx_gallery_tips_takeaway = "memory_allocated tracks CUDA tensors only; on CPU it silently reads 0, so use torch.profiler(profile_memory=True) there."
# sphinx_gallery_tips_keywords = ["torch.cuda.memory_allocated", "max_memory_allocated", "reset_peak_memory_stats", "profile_memory", "memory usage", "out of memory", "RSS"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.cuda.memory_allocated.html", "https://pytorch.org/docs/stable/profiler.html"]

# %%
# Setup
# -----
import os

import torch

torch.manual_seed(0)
torch.set_num_threads(1)  # nothing here is timed; one thread keeps small ops from stalling on a busy machine
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")

WIDTH = 2048  # Linear(2048, 2048) x 2: 32 MiB of float32 parameters


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Linear(WIDTH, WIDTH))


def rss_bytes():
    """Resident set size of this process, where /proc exists (Linux); else None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


# %%
# The article's pattern, run as written
# -------------------------------------
# On CPU the model is created in host memory; ``.to(device)`` is then a no-op, so the model
# is built between the two readings to give them something to see.
begin = torch.cuda.memory_allocated(device)
rss_begin = rss_bytes()
model = make_model().to(device)
after_model = torch.cuda.memory_allocated(device)
rss_after = rss_bytes()
param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
# The article's two print lines, verbatim.
print("Begin: {}".format(begin))  # noqa: UP032
print("1 - After model to device: {}".format(after_model))  # noqa: UP032
print(f"parameters now held on {device}: {param_bytes / 2**20:.1f} MiB; "
      f"RSS grew by {'n/a' if rss_begin is None else f'{(rss_after - rss_begin) / 2**20:.1f} MiB'}")


# %%
# Check: what does each tool see for one forward pass?
# ----------------------------------------------------
# ``torch.profiler`` with ``profile_memory=True`` attributes every allocation of the CPU
# allocator (and of CUDA's, with the CUDA activity) to the op that made it: the sum of each op's
# own allocations is what the step asked the allocator for.
from torch.profiler import ProfilerActivity, profile

x = torch.randn(512, WIDTH, device=device)  # [batch, width]


def step():
    return model(x).relu().sum()  # two [512, 2048] activations, one ReLU output


activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
a = torch.cuda.memory_allocated(device)
with profile(activities=activities, profile_memory=True) as prof:
    step()
b = torch.cuda.memory_allocated(device)
if device.type == "cuda":  # the attribute was renamed from cuda_ to device_ in torch 2.x
    fields = ("self_device_memory_usage", "self_cuda_memory_usage")
else:
    fields = ("self_cpu_memory_usage",)
field = next(f for f in fields if hasattr(prof.key_averages()[0], f))
per_op = {e.key: getattr(e, field) for e in prof.key_averages() if getattr(e, field) > 0}
profiler_bytes = sum(per_op.values())
print(f"memory_allocated difference over the step: {b - a} B")
print(f"profiler ({field}): {profiler_bytes / 2**20:.2f} MiB allocated by the step's ops: "
      + ", ".join(f"{k} {v / 2**20:.2f} MiB" for k, v in per_op.items()))
expected = 3 * 512 * WIDTH * 4  # three [512, 2048] float32 outputs
assert profiler_bytes >= expected, "the profiler should see the step's activations"

# %%
# Measurement
# -----------
# The article's reading next to the real figures, per device.
skipped = []
readings = {"memory_allocated after model.to": after_model - begin, "parameter bytes": param_bytes,
            "profiler: allocated by one step": profiler_bytes}
if torch.cuda.is_available():
    # The device-appropriate peak: reset, run, read the maximum.
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    readings["max_memory_allocated above base, one step"] = torch.cuda.max_memory_allocated() - base
else:
    print("Skipped: max_memory_allocated needs CUDA (no CUDA device in this build)")
    skipped.append("CUDA max_memory_allocated / reset_peak_memory_stats: no CUDA device in this build")
has_accelerator_api = hasattr(torch, "accelerator") and hasattr(torch.accelerator, "memory_allocated")
print(f"device-generic torch.accelerator.memory_allocated in this torch: {has_accelerator_api}")
for name, value in readings.items():
    print(f"  {name:<44} {value / 2**20:8.2f} MiB")

# %%
# Verdict
# -------
RULE = ("holds if memory_allocated(device) reports the model's bytes (within 1%) on the device "
        "this build runs on; depends if it reads 0 there while the parameters and the profiler "
        "show memory (a CUDA-only tool); wrong if it misreports on CUDA")
seen = after_model - begin
if abs(seen - param_bytes) <= 0.01 * param_bytes:
    verdict = "holds"
elif seen == 0 and device.type != "cuda" and profiler_bytes > 0:
    verdict = "depends"
else:
    verdict = "wrong"
print(f"Verdict: {verdict}. On {device}: memory_allocated saw {seen / 2**20:.2f} MiB of "
      f"{param_bytes / 2**20:.2f} MiB of parameters; the profiler saw "
      f"{profiler_bytes / 2**20:.2f} MiB allocated per step.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": "memory_allocated / parameter bytes", "value": seen / param_bytes, "unit": "x"},
    "measurements": [
        {"variant": name, "metric": "bytes", "value": value / 2**20, "unit": "MiB"}
        for name, value in readings.items()
    ],
    "skipped": skipped,
}

# %%
# When not to use it
# ------------------
# On CUDA, ``memory_allocated`` is the right gauge of live tensors; pair it with
# ``reset_peak_memory_stats()`` and ``max_memory_allocated()`` to get the peak of a step, which
# is what runs out, and remember that ``nvidia-smi`` shows more (the caching allocator's
# reserve, ``memory_reserved()``, and the CUDA context). On CPU use ``torch.profiler`` with
# ``profile_memory=True`` (per-op allocations) or the process's RSS; the
# ``torch.cuda`` functions there read 0 without an error.

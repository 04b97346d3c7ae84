"""
``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` against fragmentation
==========================================================================

An out-of-memory error on a GPU often ends with "If reserved but unallocated memory is large
try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation." The CUDA
notes (claim S6-4) describe the setting:

    "If set to True, this setting instructs the allocator to create CUDA allocations that can
    later be expanded to better handle cases where a job changing allocation sizes
    frequently, such as having a changing batch size."

By default the caching allocator asks the driver for a segment per large request and reuses a
cached block only for a request that fits in it: when the batch grows by one sample, the
slightly larger activations need new segments, and the old ones stay reserved. An expandable
segment grows instead. This tip runs the notes' own case, inference on a batch that grows by
one sample per step, under both settings. The allocator reads its settings when CUDA
initialises, so each setting runs in a child process of its own. It measures the memory
reserved against the tensor memory actually needed, and what each setting does under a memory
cap just above that need. The claim is about the CUDA caching allocator: a machine without
CUDA measures nothing here.
"""
# sphinx_gallery_tips_claims = ["S6-4"]
# sphinx_gallery_tips_tags = ["allocator", "cuda", "inference"]
# sphinx_gallery_tips_devices = ["cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "2.5"
# sphinx_gallery_tips_takeaway = "With a batch that keeps growing, expandable_segments:True lets one segment grow instead of reserving a new one per size: see the reserved memory it saves."
# sphinx_gallery_tips_keywords = ["PYTORCH_CUDA_ALLOC_CONF", "expandable_segments", "PYTORCH_ALLOC_CONF", "fragmentation", "reduce GPU memory fragmentation", "reserved but unallocated", "caching allocator", "CUDA out of memory", "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF expandable_segments True to avoid fragmentation", "memory_reserved"]
# sphinx_gallery_tips_errors = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.16 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.63 GiB is free. Including non-PyTorch memory, this process has 77.42 GiB memory in use. Of the allocated memory 68.16 GiB is allocated by PyTorch, and 3.49 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/notes/cuda.html#memory-management", "https://docs.pytorch.org/docs/stable/generated/torch.cuda.memory_stats.html", "https://docs.pytorch.org/docs/stable/generated/torch.cuda.set_per_process_memory_fraction.html"]
# sphinx_gallery_tips_related = ["tip_preallocate_variable_length", "tip_empty_cache_every_step", "tip_oom_retry"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). Memory is
# measured, not computed: the CUDA caching allocator's own counters, read in each child process.
# Each comparison pairs the anti-pattern with the recommended pattern, one pair per round, as a
# ratio; with 5 rounds or fewer the interval is their whole range. Here there is one
# comparison per run length, each of one round, so its interval is that one ratio. A
# verdict is the first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import compare_values, decide, plot_series, report


# %%
# Setup
# -----
# Two blocks ``Linear(d, 2d)``, GELU, ``Linear(2d, d)`` applied to every token of a
# ``[batch, length, d]`` input, in inference. Width and sequence length grow with the GPU's
# streaming multiprocessors (d = 1,024 and 528 tokens, about 2 MiB a sample, on a 132-SM
# H100), so that one more sample changes every activation's size by more than the allocator
# rounds sizes to (2 MiB).
import json
import os
import subprocess
import sys

import torch

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
on_cuda = device.type == "cuda"
print(f"device: {device}, torch {torch.__version__}")
GROWTH = [1, 4, 16, 64]  # steps, each one sample larger than the last
FIRST = 16  # the first batch size
skipped = []
if on_cuda:
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    d = max(64, 8 * sms // 64 * 64)
    length = 4 * sms
    print(f"d {d}, {length} tokens a sample, "
          f"batch {FIRST} growing to {FIRST + GROWTH[-1]}")
else:
    skipped.append("all measurements: the CUDA caching allocator needs a CUDA device")
    print("Skipped:", skipped[-1])

# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The program each child runs: the same inference for every run length, from an empty cache,
# then the longest run again under a memory cap of 1.25 times its peak of tensor memory. It
# prints what it measured as JSON. The only difference between the two children is the
# environment variable, set before the child starts, so before CUDA initialises in it.
CHILD = """
import json, sys
import torch

d, length, first = (int(a) for a in sys.argv[1:4])
growth = [int(n) for n in sys.argv[4].split(",")]
device = torch.device("cuda")
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Sequential(
    torch.nn.Linear(d, 2 * d), torch.nn.GELU(), torch.nn.Linear(2 * d, d))
    for _ in range(2)]).to(device)


def run(steps):  # the batch grows by one sample a step
    torch.manual_seed(1)
    with torch.no_grad():
        for batch in range(first, first + steps + 1):
            out = model(torch.randn(batch, length, d, device=device))
    return out.double().sum().item()


runs = []
for steps in growth:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    segments = torch.cuda.memory_stats()["segment.all.allocated"]
    checksum = run(steps)
    torch.cuda.synchronize()
    segments = torch.cuda.memory_stats()["segment.all.allocated"] - segments
    runs.append({"steps": steps, "checksum": checksum, "segments": segments,
                 "reserved": torch.cuda.max_memory_reserved(),
                 "allocated": torch.cuda.max_memory_allocated()})
cap = 1.25 * runs[-1]["allocated"]
torch.cuda.empty_cache()
index = torch.cuda.current_device()
total = torch.cuda.get_device_properties(index).total_memory
torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), index)
retries = torch.cuda.memory_stats()["num_alloc_retries"]
try:
    run(growth[-1])
    capped = "completed"
except torch.OutOfMemoryError as err:
    capped = "out of memory: " + str(err).split(". ")[0]
retries = torch.cuda.memory_stats()["num_alloc_retries"] - retries
capped += ", %d cache flush(es)" % retries
print(json.dumps({"runs": runs, "capped": capped}))
"""


def run_child(expandable):
    """Run CHILD in a new Python process, the allocator setting in its environment."""
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=f"expandable_segments:{expandable}")
    env.pop("PYTORCH_ALLOC_CONF", None)  # the newer name of the variable: not this one
    args = [str(d), str(length), str(FIRST), ",".join(map(str, GROWTH))]
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the child failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# %%
# Run both settings
# -----------------
results = {}
if on_cuda:
    for name, expandable in (("default", False), ("expandable_segments:True", True)):
        results[name] = run_child(expandable)
    default, expandable = results["default"], results["expandable_segments:True"]

# %%
# Check: the same outputs
# -----------------------
# The allocator decides where tensors live, not what is computed: the last output of every run
# agrees between the two settings.
if on_cuda:
    for a, b in zip(default["runs"], expandable["runs"]):
        assert abs(a["checksum"] - b["checksum"]) <= 1e-5 * abs(a["checksum"]) + 1e-3
    print("both settings compute the same outputs")

# %%
# Measurement
# -----------
# Per run length: the peak of reserved memory under each setting, against the peak of tensor
# memory (``max_memory_allocated()``, the same for both), and the segments each run created
# (``memory_stats()["segment.all.allocated"]``). Reserved without / with expandable
# segments: above 1.0, expandable segments reserve less.
saved = []
if on_cuda:
    print(f"{'steps':>5} {'tensor peak':>12} {'reserved, default':>18} "
          f"{'reserved, expandable':>21} {'segments':>14}  (MiB)")
    for a, b in zip(default["runs"], expandable["runs"]):
        print(f"{a['steps']:>5} {a['allocated'] / 2**20:>12.0f} "
              f"{a['reserved'] / 2**20:>18.0f} {b['reserved'] / 2**20:>21.0f} "
              f"{a['segments']:>6} {b['segments']:>7}")
        saved.append(compare_values(
            f"reserved, default / expandable, {a['steps']} growth steps",
            {"default": [a["reserved"] / 2**20], "expandable": [b["reserved"] / 2**20]},
            threshold=1.1, device=device, metric="memory", unit="MiB", x=a["steps"]))
    facts = {f"under a cap of 1.25x the tensor peak, {name}": r["capped"]
             for name, r in results.items()}
    for name, value in facts.items():
        print(f"{name}: {value}")

# %%
# Reserved memory against what the tensors need
# ---------------------------------------------
if on_cuda:
    fig = plot_series(
        {"tensor peak (both)": (GROWTH, [r["allocated"] / 2**20
                                         for r in default["runs"]]),
         "reserved, default": (GROWTH, [r["reserved"] / 2**20
                                        for r in default["runs"]]),
         "reserved, expandable_segments:True": (GROWTH, [r["reserved"] / 2**20
                                                         for r in expandable["runs"]])},
        xlabel="steps, the batch one sample larger each (log scale)",
        ylabel="peak memory (MiB)", device=device, logx=True,
        title=f"Inference, batch {FIRST} and growing, {length} tokens, d {d}")

# %%
# Verdict
# -------
# Decided on CUDA only. The claim holds if expandable segments reserve more than 10% less
# memory than the default (interval above 1.1) at every run with a growing batch of 4 steps
# or more; depends if at some; wrong if at none. The capped runs are reported beside it.
RULE = ("CUDA only: holds if with expandable_segments:True the peak reserved memory is "
        ">10% lower than with the default (ratio default/expandable above 1.1) after "
        "4, 16 and 64 growth steps; depends if after some; wrong if after none")
verdicts = {}
if on_cuda:
    decision = decide(device, [("holds", {"less reserved": "all above"}),
                               ("depends", {"less reserved": "any above"}),
                               ("wrong", {})],
                      groups={"less reserved": saved[1:], "one step": saved[:1]},
                      facts=facts, key=saved[-1])
    report(decision, RULE)
    verdicts[device.type] = decision
else:
    print("Verdict on CUDA: not measured (no CUDA device in this build); none on CPU")
RESULT = {"rule": RULE, "verdicts": verdicts, "measurements": [], "skipped": skipped}

# %%
# When not to use it
# ------------------
# The setting must be in the environment before CUDA initialises (before the first CUDA
# tensor), so set it in the shell or launcher, not halfway through a program. With fixed
# shapes it has little to fix: the default allocator already reuses blocks of the same sizes.
# It changes how reserved memory is laid out, not what the tensors need: if the peak of
# tensor memory itself does not fit, it cannot help (smaller batches, activation
# checkpointing or lower precision can). If you know the largest batch in advance,
# preallocating with it (see that tip) avoids the growth with the default allocator too.

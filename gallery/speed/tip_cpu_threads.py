"""
``torch.set_num_threads``: more intra-op threads help big ops, not small ones
=============================================================================

The seed articles never mention CPU thread settings. PyTorch's *Performance Tuning Guide*
("Utilize OpenMP") does:

    "``OMP_NUM_THREADS`` is the easiest switch that can be used to accelerate computations.
    It determines number of threads used for OpenMP computations."

and the note *CPU threading and TorchScript inference* says intra-op threads "can be useful in
many cases, including element-wise ops on large tensors, convolutions, GEMMs, embedding lookups
and others", and that ``torch.set_num_threads`` "always take precedence over environment
variables". Splitting an op across threads has a fixed hand-off cost, so it should pay only
when the op is large enough. This tip times a matmul and element-wise ops of several sizes at
1 thread, at one thread per core, and oversubscribed at two threads per core.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["threads"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.0"
# sphinx_gallery_tips_takeaway = "More threads speed up large matmuls and big element-wise ops; tiny ops gain nothing and oversubscribed threads lose."
# sphinx_gallery_tips_keywords = ["torch.set_num_threads", "OMP_NUM_THREADS", "intra-op", "OpenMP", "oversubscription", "get_num_threads"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/docs/stable/notes/cpu_threading_torchscript_inference.html"]

# %%
# Setup
# -----
# ``torch.utils.benchmark.Timer(num_threads=n)`` sets the intra-op thread count for the
# duration of each measurement and restores it after, so one process compares them all.
import os
import statistics

import torch
import torch.utils.benchmark as benchmark

torch.manual_seed(0)
torch.set_num_threads(min(2, torch.get_num_threads()))
cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
print(f"device: cpu, cores available: {cores}, default threads here: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")
print("OMP_NUM_THREADS =", os.environ.get("OMP_NUM_THREADS", "(unset)"))

a = torch.randn(512, 512)  # [512, 512] matmul operands
b = torch.randn(512, 512)
workloads = {
    "matmul 512x512": ("a @ b", {"a": a, "b": b}),
    "exp+mul, 1M elements": ("torch.exp(x) * x", {"x": torch.randn(1 << 20), "torch": torch}),
    "exp+mul, 16K elements": ("torch.exp(x) * x", {"x": torch.randn(1 << 14), "torch": torch}),
    "exp+mul, 256 elements": ("torch.exp(x) * x", {"x": torch.randn(256), "torch": torch}),
}

# %%
# The variants: 1 thread, one per core, oversubscribed
# ----------------------------------------------------
# Oversubscription: more runnable threads than cores. Each OpenMP parallel region waits for its
# slowest thread, and a thread that the OS has swapped out stalls the whole region -- the
# same happens when several processes (DataLoader workers, other jobs) each start
# ``cores`` threads on one machine.
thread_counts = {"1 thread": 1, f"{cores} threads": cores, f"{2 * cores} threads": 2 * cores}

# %%
# Check: same result at any thread count
# --------------------------------------
ref = a @ b
for n in thread_counts.values():
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    torch.testing.assert_close(a @ b, ref)
    torch.set_num_threads(before)
print("matmul results agree at", ", ".join(thread_counts))

# %%
# Measurement
# -----------
# Thread counts alternate round by round. Speed-up = 1-thread time / n-thread time.


def time_interleaved(stmt, globs, description, rounds=5, min_run_time=0.03):
    runs = {name: [] for name in thread_counts}
    for _ in range(rounds):
        for name, n in thread_counts.items():
            timer = benchmark.Timer(stmt, globals=globs, label="intra-op threads", sub_label=name,
                                    description=description, num_threads=n)
            runs[name].append(timer.blocked_autorange(min_run_time=min_run_time))
    return runs


all_m, ratios, per_call = [], {}, {}
one, per_core, over = thread_counts
for desc, (stmt, globs) in workloads.items():
    runs = time_interleaved(stmt, globs, desc)
    for name, ms in runs.items():
        all_m += ms
        per_call[name, desc] = [m.median * 1e6 for m in ms]
    for name in (per_core, over):
        ratios[name, desc] = [s.median / m.median for s, m in zip(runs[one], runs[name])]

benchmark.Compare(all_m).print()
# Other processes count too: a load average above the core count means the machine was already
# oversubscribed while these ran, and multi-threaded timings suffer most from that.
load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
print(f"1-minute load average during the run: {load:.1f} on {cores} cores"
      + (" -> the machine was oversubscribed by other processes" if load > cores else ""))
print("speed-up over 1 thread (median, range over rounds):")
for (name, desc), r in ratios.items():
    print(f"  {name:10s} {desc:22s}: {statistics.median(r):6.3g}x  [{min(r):.3g} .. {max(r):.3g}]")

# %%
# Verdict
# -------
# A workload *gains* from threads when even the lower quartile of its per-round speed-ups (one
# thread per core over 1 thread) is above 1.10, shows *no gain* when even the upper quartile is
# below 1.10, and is *inside the noise* otherwise. On a machine already loaded by other
# processes, extra threads mostly wait for cores; the rule then refuses to judge. Where threads
# help big ops but not small ones, the advice depends on op size (the crossover is where the
# element-wise sizes switch from gain to no gain).
RULE = (f"holds if {per_core} gain >10% over 1 thread for every workload (lower quartile of the "
        "speed-up above 1.10); wrong if for none (upper quartile below 1.10); depends otherwise, "
        "and whenever the machine's 1-minute load average exceeded 1.5x its cores")


def classify(r, threshold):
    """'gain' if even the lower quartile of the per-round ratios beats the threshold, 'no gain' if
    even the upper quartile misses it, 'noise' otherwise (one disturbed round cannot decide)."""
    q1, _, q3 = statistics.quantiles(r, n=4)
    return "gain" if q1 > threshold else "no gain" if q3 < threshold else "noise"


gains = {desc: statistics.median(ratios[per_core, desc]) for desc in workloads}
cls = {desc: classify(ratios[per_core, desc], 1.10) for desc in workloads}
winners = [d for d, c in cls.items() if c == "gain"]
busy = load > 1.5 * cores
if cores < 2:
    verdict = "depends"
    print("Only one core available: extra threads cannot run in parallel here.")
elif busy:
    verdict = "depends"
    print("The machine was busy with other processes: thread scaling measured here is contention.")
elif len(winners) == len(workloads):
    verdict = "holds"
elif all(c == "no gain" for c in cls.values()):
    verdict = "wrong"
else:
    verdict = "depends"
print(f"Verdict: {verdict}. {per_core} vs 1: "
      + ", ".join(f"{d}: {g:.3g}x ({cls[d]})" for d, g in gains.items())
      + f" (load average {load:.1f} on {cores} cores).")
print(f"Rule: {RULE}")

mm = ratios[per_core, "matmul 512x512"]
RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": f"matmul speed-up, {per_core} vs 1", "value": statistics.median(mm),
            "low": min(mm), "high": max(mm), "unit": "x"},
    "measurements": [
        {"variant": f"{desc}, {name}", "metric": "time per call", "unit": "us",
         "value": statistics.median(us), "spread": max(us) - min(us)}
        for (name, desc), us in per_call.items()
    ],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# Set threads per process, not per machine: with N worker processes on C cores, give each about
# C / N threads (``torch.set_num_threads`` inside the worker, or ``OMP_NUM_THREADS``), or the
# processes oversubscribe the cores. For many tiny ops a single thread is as fast or faster;
# for serving many small requests, several 1-thread processes often beat one multi-threaded one.

"""
Reproducible runs: seeds, deterministic algorithms, and what they cost
======================================================================

"Make my results reproducible" takes two steps, says PyTorch's *Reproducibility* notes: control
the sources of randomness (seeds), and make PyTorch avoid nondeterministic algorithms with
``torch.use_deterministic_algorithms(True)``. The same page warns about the price (claim S6-20):

    "Deterministic operations are often slower than nondeterministic operations, so single-run
    performance may decrease for your model."

This tip runs both steps: two seeded runs against two unseeded ones, then the flag, what raises
under it (an op with no deterministic implementation), and what it changes. Then it times the
ops the flag's documentation lists as switched to a deterministic algorithm on this device,
with the flag off and on, across sizes: on the CPU ``index_put_`` with ``accumulate=True``
(the backward of ``x[idx]``) and ``put_`` with ``accumulate=True``; on CUDA ``index_add_``.
The other ops, and ``torch.zeros`` (which the flag fills first: a separate, documented cost
with its own switch), are shown as controls. Everything it switches on, it switches back off:
the flags, the seeds and the random states are global to your session.
"""
# sphinx_gallery_tips_claims = ["S6-20"]
# sphinx_gallery_tips_tags = ["reproducibility", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.1"
# sphinx_gallery_tips_takeaway = "Seed every generator, then use_deterministic_algorithms(True): some ops raise or switch kernels; whether that is slower depends on the op (see figure)."
# sphinx_gallery_tips_keywords = ["reproducibility", "reproducible results", "deterministic", "use_deterministic_algorithms", "manual_seed", "random seed", "seed", "cudnn.deterministic", "CUBLAS_WORKSPACE_CONFIG", "does not have a deterministic implementation", "fill_uninitialized_memory", "same results every run", "nondeterministic"]
# sphinx_gallery_tips_errors = ["RuntimeError: put_ does not have a deterministic implementation, but you set 'torch.use_deterministic_algorithms(True)'. You can turn off determinism just for this operation, or you can use the 'warn_only=True' option, if that's acceptable for your application."]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/notes/randomness.html", "https://docs.pytorch.org/docs/stable/generated/torch.use_deterministic_algorithms.html", "https://docs.pytorch.org/docs/stable/generated/torch.manual_seed.html"]
# sphinx_gallery_tips_related = ["tip_checkpoint_resume", "tip_cudnn_benchmark"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, here deterministic time / default time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import compare_times, decide, plot_ratios, report


# %%
# Setup
# -----
# Every core's thread (torch's default): on the CPU the flag's switches act only there.
# ``index_put_`` and ``put_`` with ``accumulate=True`` add in parallel (float32, large
# tensors) only with more than one thread, and the flag makes them serial, so at one thread
# both runs take the same serial kernel. ``kept_global_state`` saves what this tip changes
# (the determinism flags, cuDNN's flags, every random generator's state) and puts it back
# after each block, so running the tip leaves your session as it found it.
import contextlib
import random
import warnings

import numpy as np
import torch
import torch.utils.deterministic  # the fill_uninitialized_memory switch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")


@contextlib.contextmanager
def kept_global_state():
    """Run a block, then restore the flags and random states it may have changed."""
    flags = (torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.utils.deterministic.fill_uninitialized_memory,
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    py_state, np_state = random.getstate(), np.random.get_state()
    cuda_devices = list(range(torch.cuda.device_count()))
    try:
        with torch.random.fork_rng(devices=cuda_devices):  # torch's CPU and CUDA states
            yield
    finally:
        torch.use_deterministic_algorithms(flags[0], warn_only=flags[1])
        torch.utils.deterministic.fill_uninitialized_memory = flags[2]
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = flags[3:]
        random.setstate(py_state)
        np.random.set_state(np_state)


# %%
# Step 1, seeds: the anti-pattern and the recommended pattern
# -----------------------------------------------------------
# A short training run whose result depends on every random source: the weights' initial
# values, dropout, and the ``DataLoader``'s shuffling. The anti-pattern seeds nothing; the
# recommended pattern seeds Python's, NumPy's and torch's generators (``torch.manual_seed``
# seeds the CPU and every CUDA device) and gives the ``DataLoader`` its own seeded generator,
# as the notes show (with ``num_workers > 0`` add their ``worker_init_fn`` too).
g_data = torch.Generator().manual_seed(1234)
X = torch.randn(256, 16, generator=g_data)  # [N, features]
Y = torch.randn(256, 1, generator=g_data)   # [N, 1]


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # CPU and all CUDA devices


def train(seed=None, steps=8):
    if seed is not None:
        seed_everything(seed)
    loader_gen = torch.Generator()
    if seed is not None:
        loader_gen.manual_seed(seed)
    else:
        loader_gen.seed()  # a fresh, nondeterministic seed, as an unseeded run gets
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.2),
                          nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(TensorDataset(X, Y), batch_size=32, shuffle=True,
                        generator=loader_gen)
    losses = []
    for (xb, yb), _ in zip(loader, range(steps)):
        loss = nn.functional.mse_loss(model(xb.to(device)), yb.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses).cpu()


with kept_global_state():
    unseeded = [train(), train()]
    seeded = [train(seed=0), train(seed=0)]

# %%
# Check: seeded runs repeat bit for bit, unseeded ones do not
# -----------------------------------------------------------
seeded_same = torch.equal(seeded[0], seeded[1])
unseeded_same = torch.equal(unseeded[0], unseeded[1])
print("two seeded runs, identical losses:  ", seeded_same)
print("two unseeded runs, identical losses:", unseeded_same)
assert seeded_same, "the seeded runs should repeat exactly"

# %%
# Step 2, ``torch.use_deterministic_algorithms(True)``: what raises, what changes
# -------------------------------------------------------------------------------
# Seeds fix the random numbers; they do not fix the order in which a parallel kernel adds up
# values (GPU atomics), which changes a float sum's last bits from call to call. The flag makes
# such ops use a deterministic algorithm, and makes an op that has none raise. ``put_`` without
# ``accumulate`` has none, on any device; ``warn_only=True`` turns the error into a warning.
with kept_global_state():
    torch.use_deterministic_algorithms(True)
    target = torch.zeros(4, device=device)
    where = torch.tensor([0, 0, 1], device=device)  # index 0 written twice: who wins?
    values = torch.tensor([1.0, 2.0, 3.0], device=device)
    raised = None
    try:
        target.put_(where, values)
    except RuntimeError as err:
        raised = str(err).split(". ")[0]
    print("RuntimeError:", raised)

    torch.use_deterministic_algorithms(True, warn_only=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target.put_(where, values)
    warned = any("deterministic" in str(w.message) for w in caught)
    print("with warn_only=True, a warning instead:", warned)
    # The flag also fills the memory torch.empty leaves uninitialized (NaN for floats)
    empty_filled = bool(torch.empty(3, device=device).isnan().all())
    print("torch.empty under the flag is filled with NaN:", empty_filled)
assert raised is not None and "deterministic" in raised
print("flag off after the block:", not torch.are_deterministic_algorithms_enabled())

# %%
# Whether repeated calls give the same bits, for an op the flag switches: ``index_add_`` of
# many rows into few, five times each way. On a GPU the default kernel adds with atomics.
with kept_global_state():
    rows = 64
    idx = torch.randint(rows, (4096,), device=device)
    src = torch.randn(4096, 64, device=device)  # [updates, features]
    distinct = {}
    for mode in (False, True):
        torch.use_deterministic_algorithms(mode)
        outs = [torch.zeros(rows, 64, device=device).index_add_(0, idx, src)
                for _ in range(5)]
        distinct[mode] = sum(not torch.equal(outs[0], o) for o in outs[1:]) + 1
print(f"index_add_, distinct results in 5 calls: default {distinct[False]}, "
      f"deterministic {distinct[True]}")
torch.testing.assert_close(outs[0], torch.zeros(rows, 64, device=device)
                           .index_add_(0, idx, src))

# %%
# Measurement: the same ops with the flag off and on
# --------------------------------------------------
# Each timed call first sets the flag (both variants pay that call), then runs one op:
#
# * ``index_put_(..., accumulate=True)``: what the backward of ``weight[idx]`` runs, which
#   the flag's documentation lists for the CPU (where it turns parallel adding off: see
#   the setup; on CUDA it adds after sorting the indices either way);
# * ``put_(..., accumulate=True)``: the same adding into a flat index, listed for the CPU;
# * ``index_add_``: listed for CUDA (its default kernel adds with atomics);
# * ``torch.zeros``: allocation, which the flag fills before zeroing it, a control; with
#   ``torch.utils.deterministic.fill_uninitialized_memory = False`` once more at the largest
#   size, the documented way to skip that fill.
#
# Sizes are elements of the updated tensor; a GPU gets sizes in proportion to its streaming
# multiprocessors (SMs), so that every SM has work.


def variants(mode_fn):
    def timed(mode):
        def run():
            torch.use_deterministic_algorithms(mode)
            return mode_fn()
        return run
    return {"deterministic": timed(True), "default": timed(False)}


# %%
# On the CPU the flag's whole effect is parallel against serial: the default kernels of
# the two switched ops add from every thread at once (atomic adds), the deterministic ones
# from one. So their ratio is only a measurement of the flag while every thread has a core
# of its own. A machine can look idle and still not give it that: on a virtual machine the
# host may run both of its cores' threads on one physical core, or take one away for a
# while, and no process of the machine shows it. On this site's 2-core build machine the
# default ``put_`` at 262,144 elements took about 1.0, 2.0 or 6-9 ms from one second to the
# next, with nothing else running, while the deterministic one stayed at 1.2-1.5 ms.
# ``thread_speedup`` checks it directly: how much faster ``torch.sin`` runs on every thread
# than on one, over 2**18 floats a thread (2**20 at least, so that each thread has enough work
# on a many-core machine too); no two threads touch the same memory, so it scales with the
# cores the threads really get. A switched point counts only if that speed-up was at least
# half the extra threads' worth (1.5 with 2 threads) just before and just after it was
# timed; otherwise it is timed again, up to ``TRIES`` times (and ``MAX_FAILED`` failed tries
# in all: a machine that never frees its cores has other work on it, which the timings'
# own readings then show).
from torch.utils import benchmark

TRIES, MAX_FAILED = 8, 24
threads = torch.get_num_threads()
parallel = device.type == "cpu" and threads > 1
speedup_floor = 1 + 0.5 * (threads - 1)
probe_input = torch.randn(max(2**20, 2**18 * threads))
probes = []  # (point, speed-up before, speed-up after, accepted)


def thread_speedup():
    """How many times faster sin(probe_input) runs on every thread than on one."""
    def per_call(n):
        return benchmark.Timer("torch.sin(x)", globals={"x": probe_input},
                               num_threads=n).timeit(10).median
    return per_call(1) / per_call(threads)


def timed_on_own_cores(name, measure):
    """``measure()``, repeated until the threads had a core each before and after it."""
    for _ in range(TRIES):
        if sum(not p[3] for p in probes) >= MAX_FAILED:
            return measure()  # counts as not had a core per thread: see the verdict
        before = thread_speedup()
        comparison = measure()
        after = thread_speedup()
        accepted = min(before, after) >= speedup_floor
        probes.append((name, before, after, accepted))
        if accepted:
            break
        print(f"  {name}: threads sped sin up {before:.2f}x / {after:.2f}x "
              f"(under {speedup_floor:g}x): timed again")
    return comparison


if device.type == "cuda":
    sm = torch.cuda.get_device_properties(device).multi_processor_count
    sizes = [sm * 2**k for k in (14, 17, 20)]
else:
    sizes = [2**12, 2**14, 2**16, 2**18]
names = ["x[idx] backward: index_put_ accumulate", "put_ accumulate", "index_add_",
         "torch.zeros"]
switched = (["index_add_"] if device.type == "cuda"
            else names[:2] if parallel else [])
series = {name: [] for name in names}
with kept_global_state():
    for n in sizes:
        updates = n // 64
        target = torch.zeros(max(updates // 4, 1), 64, device=device)  # [rows, 64]
        idx = torch.randint(target.shape[0], (updates,), device=device)
        src = torch.randn(updates, 64, device=device)  # [updates, 64]
        flat = torch.randint(target.numel(), (updates * 64,), device=device)
        ops = [lambda: target.index_put_((idx,), src, accumulate=True),
               lambda: target.put_(flat, src.flatten(), accumulate=True),
               lambda: target.index_add_(0, idx, src),
               lambda: torch.zeros(n, device=device)]
        for name, op in zip(names, ops):
            label = f"{name}, {n:,} elements"

            def measure(label=label, op=op, n=n):
                return compare_times(label, variants(op), threshold=1.10,
                                     device=device, x=n, budget_s=0.6)
            if parallel and name in switched:
                series[name].append(timed_on_own_cores(label, measure))
            else:
                series[name].append(measure())
    torch.utils.deterministic.fill_uninitialized_memory = False
    no_fill = compare_times(
        f"torch.zeros, fill_uninitialized_memory=False, {sizes[-1]:,} elements",
        variants(lambda: torch.zeros(sizes[-1], device=device)), threshold=1.10,
        device=device, x=sizes[-1], budget_s=0.6)
print("flag off after the timings:", not torch.are_deterministic_algorithms_enabled())
if parallel:
    kept = [p for p in probes if p[3]]
    print(f"switched points timed with a core per thread: {len(kept)} of "
          f"{len(series[names[0]]) * 2} ({len(probes)} tries)")

# %%
# Where it costs
# --------------
# Above 1.0 the deterministic run is slower, below it is faster.
fig = plot_ratios({**series, "torch.zeros, fill off": [no_fill]},
                  xlabel="elements", title="Each op with the flag on and off",
                  ylabel="deterministic time / default time")

# %%
# Verdict
# -------
# The claim is that deterministic operations are *often* slower and that performance *may*
# decrease. Only the ops the documentation lists as switched on this device can be slower
# because of the algorithm it picks: on the CPU ``index_put_`` and ``put_`` with
# ``accumulate=True`` (with more than one thread: at one they run their serial kernel either
# way, and nothing is switched), on CUDA ``index_add_`` (``index_put_`` sorts either way).
# The others are controls, and so is ``torch.zeros``: its fill is a separate cost, which
# ``fill_uninitialized_memory = False`` removes. An op and size is *slower* when the interval
# of its ratio lies above 1.10. The claim holds if a switched op is slower at the largest
# size; it is wrong here if none is slower at any size; otherwise, or with no op switched,
# it depends (on the size, on the threads). On the CPU it also depends, with the reason, if a
# switched point never had a core per thread in its ``TRIES``. On a GPU, a size at which the GPU was busy less
# than half the time measured the launch, not the op, and does not count. The key figure is
# the point that decided: the slowest switched op at the largest size (holds), or the
# switched point nearest to slower (otherwise).
RULE = ("holds if use_deterministic_algorithms(True) makes an op its documentation "
        "lists as switched on this device (CPU, 2 or more threads: index_put_ and put_ "
        "with accumulate=True; CUDA: index_add_) >10% slower at the largest size "
        "(interval above 1.10); wrong if no switched op is at any size; depends "
        "otherwise, or with no op switched; on the CPU a switched point counts only "
        "if the threads sped sin up by half their extra number or more "
        "just before and after it (else it depends); on a GPU only sizes that kept it "
        "busy at least half the time count")
print("ops the flag switches here:", ", ".join(switched) or "none")
slower = [series[n][-1] for n in switched if series[n][-1]["outcome"] == "above"]
points = [c for n in switched for c in series[n]]
deciding = (max(slower, key=lambda c: c["low"]) if slower
            else max(points, key=lambda c: c["high"]) if points
            else series[names[0]][-1])
CORES = "switched points had a core per thread"
own_cores = not parallel or all(
    any(p[0] == c["name"] and p[3] for p in probes)
    for n in switched for c in series[n])
decision = decide(device, [("depends", {"an op switches": True, CORES: False}),
                           ("holds", {"an op switches": True,
                                      "switched, largest size": "any above"}),
                           ("wrong", {"an op switches": True,
                                      "switched, every size": "none above"}),
                           ("depends", {})],
                  groups={"switched, largest size": [series[n][-1] for n in switched],
                          "switched, every size": [c for n in switched
                                                   for c in series[n]],
                          "controls": [c for n in names if n not in switched
                                       for c in series[n]],
                          "fill off": [no_fill]},
                  facts={"an op switches": bool(switched),
                         CORES: own_cores,
                         "seeded runs repeat": seeded_same,
                         "unseeded runs repeat": unseeded_same,
                         "op without deterministic implementation raises": raised,
                         "index_add_ distinct results, default": distinct[False],
                         "index_add_ distinct results, deterministic": distinct[True]},
                  key=deciding, about="device")
report(decision, RULE)
measurements = [{"variant": name, "metric": "sin speed-up, every thread over one, "
                 "lower of before and after", "value": round(min(before, after), 3),
                 "unit": "x", "device": device.type}
                for name, before, after, accepted in probes if accepted]
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": measurements, "skipped": []}

# %%
# When not to use it
# ------------------
# Seed every run you may need to repeat: it costs nothing. Switch the flag on while you debug,
# compare or test, and measure before leaving it on for long training runs: on a GPU the ops
# that add with atomics (``index_add_``, ``scatter_add_``) switch to deterministic kernels,
# and some ops raise (several pooling and padding backwards, among others). If your code
# never reads memory it did not write,
# ``torch.utils.deterministic.fill_uninitialized_memory = False`` removes the fill that the
# flag adds to every ``torch.empty`` (and to ``torch.zeros``: see the figure).
# cuDNN has its own switches (``torch.backends.cudnn.deterministic = True``,
# ``torch.backends.cudnn.benchmark = False``); older releases also raise on cuBLAS matmuls
# under the flag unless ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` is set before CUDA starts. Runs are
# only repeatable on the same hardware, software and torch release.

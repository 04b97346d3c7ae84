"""
DDP with gradient accumulation: skip the all-reduce with ``no_sync()``
======================================================================

PyTorch's *Performance Tuning Guide* ("Skip unnecessary all-reduce if training with
``DistributedDataParallel`` and gradient accumulation", claim S5-8):

    "If training uses gradient accumulation over N steps, then all-reduce is not necessary
    after every training step, it's only required to perform all-reduce after the last call
    to backward, just before the execution of the optimizer."

``DistributedDataParallel`` (DDP) averages the gradients of all processes with an all-reduce
inside every ``backward()``. With gradient accumulation only the sum over the N micro-batches
reaches the optimizer, so the N - 1 earlier all-reduces are wasted communication;
``model.no_sync()`` turns them off. This tip trains one model in two processes on the CPU
(the ``gloo`` backend): this page's own process is rank 0 and a child process is rank 1. It
checks that both loops give the same weights, counts the all-reduces, and times one optimizer
step of 4 micro-batches with each loop as the micro-batch grows (more computation for the same
communication).
"""
# sphinx_gallery_tips_claims = ["S5-8"]
# sphinx_gallery_tips_tags = ["distributed", "training"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "With DDP and gradient accumulation, no_sync() on all but the last micro-batch gives the same weights and all-reduces once per step, not N times."
# sphinx_gallery_tips_keywords = ["DistributedDataParallel", "no_sync", "gradient accumulation", "all-reduce", "allreduce", "DDP slow", "gloo", "require_backward_grad_sync"]
# sphinx_gallery_tips_related = ["tip_gradient_accumulation", "tip_ddp_find_unused_parameters"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html", "https://docs.pytorch.org/docs/stable/ddp_comm_hooks.html", "https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, anti-pattern time / recommended time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import (TwoRanks, check_plausible, compare_times, decide, free_port,
                            plot_ratios, report)


# %%
# Setup
# -----
# Two ranks, each with half of this machine's cores as intra-op threads. ``TwoRanks`` starts the
# other rank as a fresh ``python`` process and passes calls to it; a rank that fails, or does
# not answer within 120 s, fails this page with its error output.
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

world_size = 2
cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
         else os.cpu_count())
threads = max(1, cores // world_size)
device = torch.device("cpu")  # gloo on the CPU; several GPUs are not measured here
gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(f"cores: {cores}, ranks: {world_size}, threads per rank: {threads}, "
      f"torch {torch.__version__}")


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The functions below are what every rank runs: this page's process calls them as rank 0,
# and ``TwoRanks`` sends their source to a fresh Python process, rank 1, which calls them
# when rank 0 asks (a fresh interpreter, not a fork: forking a process whose OpenMP threads
# are running can hang), so both ranks run the same calls in the same order, as the ranks of
# a real training run do. ``join`` returns a rank's state, which every other function takes
# first. Each rank trains on its own micro-batches.
WIDTH, DEPTH, MICRO_BATCHES = 256, 4, 4


def step_syncing(model, optimizer, micro_batches):
    """Anti-pattern: every backward() all-reduces the gradients."""
    for x, y in micro_batches:
        loss = F.mse_loss(model(x), y) / len(micro_batches)
        loss.backward()  # all-reduce
    optimizer.step()
    optimizer.zero_grad()


def step_no_sync(model, optimizer, micro_batches):
    """Recommended: accumulate locally, all-reduce once in the last backward()."""
    *first, (x_last, y_last) = micro_batches
    with model.no_sync():  # forward and backward inside: no communication
        for x, y in first:
            loss = F.mse_loss(model(x), y) / len(micro_batches)
            loss.backward()
    loss = F.mse_loss(model(x_last), y_last) / len(micro_batches)
    loss.backward()  # one all-reduce of the accumulated gradients
    optimizer.step()
    optimizer.zero_grad()


SYNCING, SKIPPING = "all-reduce every micro-batch", "no_sync()"


def loop(variant):
    return {SYNCING: step_syncing, SKIPPING: step_no_sync}[variant]


def make_model():
    torch.manual_seed(0)  # the same start on every rank (DDP broadcasts rank 0's)
    layers = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def join(rank, world_size, port, threads):
    """Join the process group; this rank's DDP model, its optimizer and its data."""
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=60))
    model = DDP(make_model())
    return {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.01),
            "start": {k: v.clone() for k, v in model.state_dict().items()},
            "gen": torch.Generator().manual_seed(rank), "data": {}}


def micro_batches(me, size):  # [size, WIDTH] inputs and targets
    if size not in me["data"]:
        me["data"][size] = [(torch.randn(size, WIDTH, generator=me["gen"]),
                             torch.randn(size, WIDTH, generator=me["gen"]))
                            for _ in range(MICRO_BATCHES)]
    return me["data"][size]


def step(me, variant, size):
    loop(variant)(me["model"], me["optimizer"], micro_batches(me, size))


def checksum_after_one_step(me, variant, size):
    """From the same start, one step; the sum of the weights (kept: ``me["last"]``)."""
    me["model"].load_state_dict(me["start"])
    step(me, variant, size)
    me["last"] = [p.detach().clone() for p in me["model"].parameters()]
    return sum(w.double().sum().item() for w in me["last"])


def allreduces_per_step(me, variant, size):
    """All-reduces launched in one optimizer step, counted by a comm hook."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import (
        allreduce_hook)

    model = DDP(make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    launched = []

    def counting_hook(state, bucket):
        launched.append(bucket.index())
        return allreduce_hook(state, bucket)

    model.register_comm_hook(None, counting_hook)
    # one step first: DDP settles its buckets in the first one
    loop(variant)(model, optimizer, micro_batches(me, size))
    launched.clear()
    loop(variant)(model, optimizer, micro_batches(me, size))
    return len(launched)


def leave(me):
    dist.destroy_process_group()


# %%
# Check: both loops give the same weights
# ---------------------------------------
# First the two ranks start (DDP needs both before any step). From the
# same start, one optimizer step with each loop: the weights after it must agree (to
# float32 rounding: the sums run in another order), and rank 1 must hold the same weights as
# rank 0. A communication hook that counts the all-reduces DDP launches shows what
# ``no_sync()`` saves.
port = free_port()
ranks = TwoRanks(join, world_size, port, threads, leave=leave,
                 env={"OMP_NUM_THREADS": str(threads), "CUDA_VISIBLE_DEVICES": ""})
me, both = ranks.me, ranks.both  # rank 0 is this process

syncing, skipping = SYNCING, SKIPPING
weights, rank_sums = {}, {}
for v in (syncing, skipping):
    rank_sums[v] = both(checksum_after_one_step, v, 8)  # rank 0's sum, rank 1's
    weights[v] = me["last"]  # rank 0's weights after that step
# the two loops reach the same weights (the rule's "wrong" where they do not) ...
same_weights = all(torch.allclose(b, a, rtol=1.3e-6, atol=1e-5)
                   for a, b in zip(weights[syncing], weights[skipping]))
# ... and the ranks agree with each other, or DDP itself is broken: stop here
ranks_agree = all(abs(r0 - r1) <= 1e-6 * max(1.0, abs(r0))
                  for r0, r1 in rank_sums.values())
assert ranks_agree, f"the ranks' weights differ: {rank_sums}"
allreduces = {v: both(allreduces_per_step, v, 8)[0] for v in (syncing, skipping)}
print(f"same weights with both loops: {same_weights}; the ranks agree; all-reduces per "
      f"optimizer step: {allreduces}")

# %%
# Measurement
# -----------
# One timed call is one optimizer step of 4 micro-batches on both ranks; rank 0 times it, and
# since every all-reduce waits for both ranks, its time is the step's. The micro-batch grows
# from 1 to 64 samples per rank: the computation grows with it, the communication (all the
# gradients, 1 MiB) does not. Speed-up = step time with an all-reduce every micro-batch /
# step time with ``no_sync()``.
sizes = [1, 4, 16, 64]


def timed(variant, size):
    return lambda: both(step, variant, size)


speedups = []
try:
    for size in sizes:
        speedups.append(compare_times(
            f"no_sync() speed-up, micro-batches of {size}",
            {syncing: timed(syncing, size), skipping: timed(skipping, size)},
            threshold=1.05, device=device, x=size, budget_s=0.5))
finally:
    ranks.close()

# The same computation either way, a quarter of the all-reduces: a step can at best
# take a quarter of the time (were it all communication). A speed-up whose whole
# interval is above that measured something else, and fails this page.
fewer = allreduces[syncing] / allreduces[skipping]
for speedup in speedups:
    check_plausible(speedup, at_most=fewer, because=f"{allreduces[syncing]} "
                    f"all-reduces against {allreduces[skipping]}")

# %%
# Where it pays
# -------------
# Above 1.0 ``no_sync()`` is faster. Its gain is the N - 1 all-reduces it skips, so it is
# largest where the computation per micro-batch is small next to the all-reduce.
fig = plot_ratios({"no_sync() vs all-reduce every micro-batch": speedups},
                  xlabel="samples per micro-batch on each rank (log scale)",
                  title=f"DDP, {world_size} ranks (gloo), 4 micro-batches per step")

# %%
# Verdict
# -------
# The claim has two parts: the earlier all-reduces are not needed (the weights must come out
# the same), and skipping them pays. A micro-batch size *gains* when the interval of its
# speed-up lies above 1.05, and gains *less than 5%* when it lies below (which is not the
# same as slower). The gain shrinks as the computation grows, so the rule asks for a clear
# gain at some size and no size that clearly gains less than 5%. Different weights make the
# advice wrong whatever the timing.
RULE = ("holds if no_sync() gives the same weights and one step is >1.05x faster "
        "(interval above 1.05) at one or more micro-batch sizes and clearly not "
        "(interval below 1.05) at none; wrong if the weights differ; depends otherwise")
decision = decide(device, [("wrong", {"same weights": False}),
                           ("holds", {"same weights": True, "speed-up": "any above",
                                      "every size": "none below"}),
                           ("depends", {})],
                  groups={"speed-up": speedups, "every size": speedups},
                  facts={"same weights": same_weights,
                         "all-reduces per step, every micro-batch": allreduces[syncing],
                         "all-reduces per step, no_sync()": allreduces[skipping],
                         "ranks": world_size, "threads per rank": threads},
                  key=speedups[-1])
report(decision, RULE)
skipped = [f"CUDA (NCCL, one GPU per rank): not measured on this machine: needs 2 GPUs "
           f"({gpus} here); this page runs DDP on the CPU with gloo"]
RESULT = {"rule": RULE, "verdicts": {"cpu": decision}, "measurements": [],
          "skipped": skipped}

# %%
# When not to use it
# ------------------
# ``no_sync()`` must wrap the forward pass too: DDP prepares the all-reduce in ``forward()``,
# so a backward outside the context still synchronises. Without gradient accumulation there
# is nothing to skip. Between synchronisations each rank's gradients differ, so anything that
# reads them before the last backward (clipping, logging gradient norms) sees one rank's
# gradients only: clip after the last backward. The accumulated gradients stay in memory
# either way.

"""
``DistributedDataParallel`` or ``DataParallel``: what runs without several GPUs
===============================================================================

PyTorch's *Performance Tuning Guide* ("Use efficient data-parallel backend", claim S5-7):

    "``DistributedDataParallel`` offers much better performance and scaling to multiple-GPUs."

``nn.DataParallel`` is one process: in every forward it copies the model to each GPU, splits
the batch, runs the copies in threads and gathers the outputs on the first GPU.
``DistributedDataParallel`` (DDP) runs one process per GPU, each with its own copy for the
whole run, and only all-reduces the gradients; its documentation says it "is proven to be
significantly faster than torch.nn.DataParallel for single-node multi-GPU data parallel
training". The claim is about several GPUs, which no machine that builds this site has: that
part is **not measured** here. What runs anywhere is the case of a machine without a GPU,
where ``DataParallel`` finds no device and simply runs the module in one process, while DDP
(the ``gloo`` backend) still runs one process per rank, each on its own share of the batch
(DDP does not split the batch itself: each rank loads its share, here by slicing, in a real
run through a ``DistributedSampler``). This tip checks that behaviour, then times one
training step both ways on the same cores as the batch grows. This page's process is DDP's
rank 0; a child process is rank 1 and runs ``DataParallel``.
"""
# sphinx_gallery_tips_claims = ["S5-7"]
# sphinx_gallery_tips_tags = ["distributed", "training"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_rules = ["PTT035"]
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "Without a GPU, DataParallel is the model itself in one process: DDP wins only where several processes beat one. Several GPUs: not measured."
# sphinx_gallery_tips_keywords = ["DataParallel", "DistributedDataParallel", "nn.DataParallel", "DDP vs DataParallel", "multi-GPU", "data parallel", "device_ids", "gloo"]
# sphinx_gallery_tips_errors = ["UserWarning: Was asked to gather along dimension 0, but all input tensors were scalars; will instead unsqueeze and return a vector."]
# sphinx_gallery_tips_related = ["tip_cpu_ddp_gloo", "tip_ddp_no_sync_accumulation"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/generated/torch.nn.DataParallel.html", "https://docs.pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html", "https://docs.pytorch.org/docs/stable/notes/cuda.html#use-nn-parallel-distributeddataparallel-instead-of-multiprocessing-or-nn-dataparallel", "https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, anti-pattern time / recommended time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import (TwoRanks, check_plausible, compare_times, cores_were_free,
                            cpu_ticks, decide, free_port, plot_ratios, report)


# %%
# Setup
# -----
# The same cores either way: ``DataParallel`` in one process with one intra-op thread per
# core, or two DDP ranks with half of them each. ``TwoRanks`` starts the other rank as a fresh
# ``python`` process and passes calls to it; a rank that fails, or does not answer within
# 120 s, fails this page with its error output. Rank 1 sees no GPU
# (``CUDA_VISIBLE_DEVICES=""``), so its ``DataParallel`` is the CPU one on any machine.
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


def n_threads(n):
    return f"{n} thread{'' if n == 1 else 's'}"


device = torch.device("cpu")
gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(f"cores: {cores}, GPUs: {gpus}, torch {torch.__version__}")
print(f"DataParallel: 1 process, {n_threads(cores)}; DDP: {world_size} ranks of "
      f"{n_threads(threads)}")


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# One training step of a model of two 128-wide linear layers on a global batch:
# ``DataParallel`` takes the whole batch; each of the two DDP ranks takes half, and DDP
# averages their gradients with an all-reduce. The functions below are what every rank runs:
# this page's process calls them as rank 0, and ``TwoRanks`` sends their source to a fresh
# Python process, rank 1, which calls them when rank 0 asks (a fresh interpreter, not a
# fork: forking a process whose OpenMP threads are running can hang). ``join`` returns a
# rank's state, which every other function takes first. Both ranks draw the same global
# batch and each takes its half.
WIDTH, DEPTH = 128, 2


def make_model():
    torch.manual_seed(0)  # the same start in every process
    layers = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def train_step(model, optimizer, x, y):
    F.mse_loss(model(x), y).backward()  # under DDP: all-reduce of the gradients
    optimizer.step()
    optimizer.zero_grad()


def join(rank, world_size, port, threads, all_threads):
    """Join the process group; this rank's state."""
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=60))
    return {"rank": rank, "world_size": world_size, "threads": threads,
            "all_threads": all_threads, "runs": {}}


def global_batch(batch):  # [batch, WIDTH] inputs and targets, the same on every rank
    gen = torch.Generator().manual_seed(batch)
    return (torch.randn(batch, WIDTH, generator=gen),
            torch.randn(batch, WIDTH, generator=gen))


def fingerprint(me, batch, kind):
    """Sum and sum of squares of the model's weights, in float64."""
    weights = torch.cat([p.detach().double().flatten()
                         for p in me["runs"][batch, kind][0].parameters()])
    return [weights.sum().item(), weights.square().sum().item()]


# Anti-pattern: DataParallel, one process, the whole batch (rank 1, which sees no GPU)
def prepare_dataparallel(me, batch):
    dp = torch.nn.DataParallel(make_model())
    x, y = global_batch(batch)
    me["runs"][batch, "dp"] = (dp, torch.optim.SGD(dp.parameters(), lr=0.01), x, y)


def dataparallel_steps(me, batch, steps):
    """``steps`` DataParallel training steps; the intra-op threads they ran with."""
    torch.set_num_threads(me["all_threads"])
    for _ in range(steps):
        train_step(*me["runs"][batch, "dp"])
    return torch.get_num_threads()


def dataparallel_behaviour(me, batch):
    """The devices DataParallel uses here; whether it gives the module's output."""
    dp, _, x, _ = me["runs"][batch, "dp"]
    with torch.no_grad():
        same = torch.equal(dp(x), dp.module(x))
    return {"devices": len(dp.device_ids), "same output as the module": same}


# Recommended: DDP, one process per rank, each on its own share of the batch
def prepare_ddp(me, batch):
    ddp = DDP(make_model())
    x, y = global_batch(batch)
    per_rank = batch // me["world_size"]
    shard = slice(me["rank"] * per_rank, (me["rank"] + 1) * per_rank)
    me["runs"][batch, "ddp"] = (ddp, torch.optim.SGD(ddp.parameters(), lr=0.01),
                                x[shard], y[shard])


def ddp_steps(me, batch, steps):
    """``steps`` DDP training steps; the intra-op threads they ran with."""
    torch.set_num_threads(me["threads"])
    for _ in range(steps):
        train_step(*me["runs"][batch, "ddp"])
    return torch.get_num_threads()


def leave(me):
    dist.destroy_process_group()


# %%
# Check: what DataParallel does here, and that both train the same model
# ----------------------------------------------------------------------
# First the two ranks start: rank 1, in a fresh Python process, sees no GPU. Without a GPU,
# ``DataParallel`` keeps no device ids and calls the module itself. One DDP step
# on two halves of a batch and one ``DataParallel`` step on the whole batch must leave the
# same weights (compared through their sum and sum of squares, to float32 rounding). Neither
# way may oversubscribe the cores: the two ranks' intra-op threads together, and
# ``DataParallel``'s, must be this page's cores, no more (a thread more than the cores makes
# a parallel region wait for a descheduled thread, and the timing measures that).
port = free_port()
ranks = TwoRanks(join, world_size, port, threads, cores, leave=leave,
                 env={"OMP_NUM_THREADS": str(threads), "CUDA_VISIBLE_DEVICES": ""})
me, both, on_rank_1 = ranks.me, ranks.both, ranks.on_rank_1  # rank 0 is this process

batches = [16, 64, 256, 1024]
for batch in batches:
    both(prepare_ddp, batch)
    on_rank_1(prepare_dataparallel, batch)
behaviour = on_rank_1(dataparallel_behaviour, batches[1])
print("DataParallel without a GPU:", behaviour)
ddp_threads = sum(both(ddp_steps, batches[1], 1))
dp_threads = on_rank_1(dataparallel_steps, batches[1], 1)
ddp_print = fingerprint(me, batches[1], "ddp")
dp_print = on_rank_1(fingerprint, batches[1], "dp")
for a, b in zip(ddp_print, dp_print):
    assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (ddp_print, dp_print)
print("one DDP step = one DataParallel step on the whole batch")
print(f"intra-op threads: DDP {ddp_threads} over {world_size} ranks, "
      f"DataParallel {dp_threads}, cores {cores}")
assert ddp_threads <= cores and dp_threads == cores, "threads do not match the cores"
runs_module_itself = (behaviour["devices"] == 0
                      and behaviour["same output as the module"])

# %%
# Measurement
# -----------
# One timed call is one training step, several in a row for the smallest batches (8 steps of
# 16 samples, 2 of 64), so that each process runs its steps back to back as in a real run and
# waking it up for a call costs little next to them. For DDP, rank 0 times the call; every
# all-reduce waits for both ranks, so its time is the steps'. ``DataParallel`` runs in rank 1
# while rank 0 waits. The global batch grows from 16 to 1,024 samples: the computation grows
# with it, the all-reduce (the same 129 KiB of gradients) does not. Speed-up =
# ``DataParallel`` time / DDP time.
speedups, spans = [], []
dp = f"DataParallel, {n_threads(cores)}"
ddp = f"DDP, {world_size} x {n_threads(threads)}"
try:
    for batch in batches:
        steps = max(1, 128 // batch)
        before = cpu_ticks()
        speedups.append(compare_times(
            f"DDP speed-up, global batch {batch}",
            {dp: lambda: on_rank_1(dataparallel_steps, batch, steps),
             ddp: lambda: both(ddp_steps, batch, steps)},
            threshold=1.05, device=device, x=batch, min_rounds=12, budget_s=3,
            cores=cores))
        spans.append((before, cpu_ticks()))
finally:
    ranks.close()

# Both ways need every core; the cores count as free only if no batch's timing saw
# other processes use a quarter of a core (rank 1, a child, is not counted).
others, free = cores_were_free(spans, cores)
print("other processes' CPU use while timing, cores (busiest batch):", others)

# Two ranks on the cores of one process can at best halve its time (one that used a
# single core, against two that use one each): a speed-up whose whole interval is above
# 2x measured something else (oversubscribed threads, contention) and fails this page.
# Only where the cores were free: under contention the page says "busy" instead.
for speedup in speedups if free else []:
    check_plausible(speedup, at_most=world_size,
                    because=f"{world_size} processes on the cores of 1")

# %%
# Where it pays
# -------------
# Above 1.0 the two DDP processes train faster than ``DataParallel`` on the same cores.
fig = plot_ratios({f"DDP {world_size} ranks vs DataParallel (CPU)": speedups},
                  xlabel="global batch (log scale)",
                  ylabel="DataParallel time / DDP time",
                  title=f"No GPU: {cores} cores, 2 linear layers of 128")

# %%
# Verdict
# -------
# Only the CPU is decided here, and only where ``DataParallel`` really ran the module itself.
# A batch *gains* when the interval of its speed-up lies above 1.05. Both ways need the cores
# free: with other processes on them, a descheduled thread holds up its process at the next
# parallel region, and a descheduled rank holds up the other at the next all-reduce, so the
# timing says as much about the load as about the two patterns. DDP performs better on this
# machine if, with the cores free, it gains at every batch. Anything else makes the advice
# depend on the setting: the claim is about several GPUs, which this page cannot run, so a
# CPU that does not favour DDP cannot make it wrong.
RULE = ("on a machine without GPUs, where DataParallel runs the module itself: "
        "holds if, with the cores free (other processes below 0.25 cores), two DDP "
        "ranks make a step >1.05x faster than DataParallel on the same cores (interval "
        "above 1.05) at every batch; depends otherwise (on the batch, on other "
        "processes and on the machine: the claim's several GPUs are not measured)")
decision = decide(device, [("holds", {"DataParallel runs the module itself": True,
                                      "cores free": True, "speed-up": "all above"}),
                           ("depends", {})],
                  groups={"speed-up": speedups},
                  facts={"DataParallel runs the module itself": runs_module_itself,
                         "DataParallel devices": behaviour["devices"],
                         "cores": cores, "ranks": world_size,
                         "threads per rank": threads,
                         "other processes (cores)": others, "cores free": free},
                  key=min(speedups, key=lambda c: c["low"]))  # the weakest gain
report(decision, RULE)
skipped = [f"DataParallel against DDP on several GPUs (the claim's setting): not "
           f"measured on this machine: needs 2 or more GPUs ({gpus} here)"]
RESULT = {"rule": RULE, "verdicts": {"cpu": decision}, "measurements": [],
          "skipped": skipped}

# %%
# When not to use it
# ------------------
# On several GPUs the documentation of ``DataParallel`` itself recommends DDP "even if there is
# only a single node"; this page does not measure that. DDP costs more set-up: a process per
# device (``torchrun`` or ``torch.multiprocessing``), a process group, a
# ``DistributedSampler`` so that each rank reads its own share of the data, and rank-aware
# logging and checkpointing. On a single GPU neither wrapper speeds anything up. On a machine
# without a GPU, ``DataParallel`` adds nothing; whether DDP's processes beat one process with
# all the threads depends on the model and the batch (see the CPU DDP tip).

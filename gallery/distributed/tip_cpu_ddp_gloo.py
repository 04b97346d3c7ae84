"""
DDP on a CPU machine: two processes against one with the same cores
====================================================================

PyTorch's *Performance Tuning Guide* ("Train a model on CPU with PyTorch
``DistributedDataParallel`` (DDP) functionality", claim S5-5):

    "On a machine with multiple sockets, distributed training brings a high-efficient hardware
    resource usage to accelerate the training process."

Its NUMA section explains why: a process that reads memory attached to the other socket pays
for it, so the guide runs one training process per socket, each bound to its own socket's
cores and memory (``numactl --cpunodebind=N --membind=N``). On one socket the question that
remains is whether several DDP processes use the same cores better than one process whose
intra-op threads split every op. Threads only pay on ops large enough to split (see the
``torch.set_num_threads`` tip), while each DDP rank runs whole ops on its share of the batch and
pays an all-reduce of every gradient per step. This tip trains the same model both ways on
the same cores, with the same global batch, from the smallest layers to ones whose matmuls
split well across threads. This page's process is rank 0 (and the single process); a child
process is rank 1. The guide pairs this advice with Intel's ``torch-ccl`` (oneCCL) backend;
this page uses ``gloo``, which ships with PyTorch. Machines with two or more sockets are not
measured here.
"""
# sphinx_gallery_tips_claims = ["S5-5"]
# sphinx_gallery_tips_tags = ["distributed", "training", "threads"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "On one socket DDP adds an all-reduce per step; it beats one multi-threaded process only where that process's threads stall. Several sockets: not measured."
# sphinx_gallery_tips_keywords = ["DistributedDataParallel", "DDP on CPU", "CPU training", "one process vs DDP", "gloo", "multiple sockets", "NUMA", "numactl", "processes vs threads", "init_process_group"]
# sphinx_gallery_tips_related = ["tip_cpu_threads", "tip_cpu_thread_affinity", "tip_ddp_vs_dataparallel"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html", "https://docs.pytorch.org/docs/stable/distributed.html", "https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html"]

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
# The same cores either way: one process with one intra-op thread per core, or two ranks with
# half of them each. ``TwoRanks`` starts the other rank as a fresh ``python`` process and passes
# calls to it; a rank that fails, or does not answer within 120 s, fails this page with its
# error output. The machine's sockets and NUMA nodes are read from Linux's ``/proc`` and
# ``/sys`` (unknown elsewhere).
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


def count_sockets_and_numa_nodes():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            ids = {line.split(":")[1].strip() for line in fh
                   if line.startswith("physical id")}
        nodes = [d for d in os.listdir("/sys/devices/system/node")
                 if d.startswith("node")]
    except OSError:
        return None, None
    return max(1, len(ids)), max(1, len(nodes))


sockets, numa_nodes = count_sockets_and_numa_nodes()
print(f"cores: {cores}, sockets: {sockets}, NUMA nodes: {numa_nodes}, "
      f"torch {torch.__version__}")
print(f"one process: {n_threads(cores)}; DDP: {world_size} ranks of "
      f"{n_threads(threads)}")


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# One training step on a global batch of 64 samples: in one process (threads split each op),
# or in two DDP ranks of 32 samples each, whose gradients DDP averages with an all-reduce. The
# functions below are what every rank runs: this page's process calls them as rank 0, and
# ``TwoRanks`` sends their source to a fresh Python process, rank 1, which calls them when
# rank 0 asks (a fresh interpreter, not a fork: forking a process whose OpenMP threads are
# running can hang). ``join`` returns a rank's state, which every other function takes
# first. Both ranks draw the same global batch and each takes its half.
DEPTH, GLOBAL_BATCH = 2, 64


def make_model(width):
    torch.manual_seed(0)  # the same start in every process
    layers = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
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


def prepare(me, width):
    """This rank's DDP model and its shard of the batch; the one-process model and
    the whole batch (rank 1 times it, rank 0 checks it against DDP)."""
    gen = torch.Generator().manual_seed(width)  # the same batch on every rank
    x, y = (torch.randn(GLOBAL_BATCH, width, generator=gen),
            torch.randn(GLOBAL_BATCH, width, generator=gen))  # [GLOBAL_BATCH, width]
    per_rank = GLOBAL_BATCH // me["world_size"]
    shard = slice(me["rank"] * per_rank, (me["rank"] + 1) * per_rank)
    ddp = DDP(make_model(width))
    one = make_model(width)
    me["runs"][width] = {
        "ddp": (ddp, torch.optim.SGD(ddp.parameters(), lr=0.01), x[shard], y[shard]),
        "one": (one, torch.optim.SGD(one.parameters(), lr=0.01), x, y)}


def ddp_steps(me, width, steps):
    """``steps`` DDP training steps; the intra-op threads they ran with."""
    torch.set_num_threads(me["threads"])
    for _ in range(steps):
        train_step(*me["runs"][width]["ddp"])
    return torch.get_num_threads()


def one_process_steps(me, width, steps):
    """``steps`` training steps on the whole batch; the intra-op threads."""
    torch.set_num_threads(me["all_threads"])
    for _ in range(steps):
        train_step(*me["runs"][width]["one"])
    return torch.get_num_threads()


def weights(me, width, kind):
    return [p.detach().clone() for p in me["runs"][width][kind][0].parameters()]


def leave(me):
    dist.destroy_process_group()


# %%
# Check: one DDP step is one step on the whole batch
# --------------------------------------------------
# First the two ranks start. DDP averages the two ranks' gradients; each is the mean over 32
# samples, so their average is the gradient of the mean over all 64, and one DDP step must
# leave the weights the single process reaches (to float32 rounding: the sums run in another
# order). Neither way may oversubscribe the cores: the two ranks' intra-op threads together,
# and the single process's, must be this page's cores, no more (a thread more than the
# cores makes a parallel region wait for a descheduled thread, and the timing measures that).
port = free_port()
ranks = TwoRanks(join, world_size, port, threads, cores, leave=leave,
                 env={"OMP_NUM_THREADS": str(threads), "CUDA_VISIBLE_DEVICES": ""})
me, both, on_rank_1 = ranks.me, ranks.both, ranks.on_rank_1  # rank 0 is this process

widths = [32, 128, 256, 512]
for width in widths:
    both(prepare, width)
ddp_threads = sum(both(ddp_steps, widths[1], 1))
one_threads = one_process_steps(me, widths[1], 1)
for a, b in zip(weights(me, widths[1], "ddp"), weights(me, widths[1], "one")):
    torch.testing.assert_close(a, b)
print("one DDP step = one step on the whole batch in one process")
print(f"intra-op threads: DDP {ddp_threads} over {world_size} ranks, "
      f"one process {one_threads}, cores {cores}")
assert ddp_threads <= cores and one_threads == cores, "threads do not match the cores"
torch.set_num_threads(threads)  # rank 0's own, while rank 1 runs the single process

# %%
# Measurement
# -----------
# One timed call is one training step, 8 in a row for the smallest model, so that rank 1
# runs its steps back to back as in a real run and waking it up for a call costs little
# next to them. For DDP, rank 0 times the call; every all-reduce waits for both ranks, so its
# time is the steps'. The single process runs on rank 1, with every core's thread, while
# rank 0 waits, so both timed calls pass the call to rank 1 and its answer back (a JSON line
# each way) and neither pays for that alone. The layers grow from 32 to 512 wide: the
# matmuls grow from too small to split across threads to large enough to split well, while
# the all-reduce grows with the parameters. Speed-up = one-process time / DDP time.
speedups, spans = [], []
one = f"1 process, {n_threads(cores)}"
ddp = f"DDP, {world_size} x {n_threads(threads)}"
try:
    for width in widths:
        steps = max(1, 2**13 // width**2)
        before = cpu_ticks()
        speedups.append(compare_times(
            f"DDP speed-up, layers {width} wide",
            {one: lambda: on_rank_1(one_process_steps, width, steps),
             ddp: lambda: both(ddp_steps, width, steps)},
            threshold=1.05, device=device, x=width, min_rounds=12, budget_s=3,
            cores=cores))
        spans.append((before, cpu_ticks()))
finally:
    ranks.close()

# Both ways need every core; the cores count as free only if no width's timing
# saw other processes use a quarter of a core (rank 1, a child, is not counted).
others, free = cores_were_free(spans, cores)
print("other processes' CPU use while timing, cores (busiest width):", others)

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
# Above 1.0 the two DDP processes train faster than one process on the same cores.
fig = plot_ratios({f"DDP {world_size} ranks vs 1 process": speedups},
                  xlabel="layer width (log scale)", ylabel="1-process time / DDP time",
                  title=f"{cores} cores, global batch 64, 2 linear layers")

# %%
# Verdict
# -------
# A width *gains* when the interval of its speed-up lies above 1.05. The guide's claim is
# about several sockets, where each process keeps to its own socket's memory. Both ways need
# the cores free: with other processes on them, a descheduled thread holds up its process at
# the next parallel region, and a descheduled rank holds up the other at the next
# all-reduce, so the timing says as much about the load as about the two patterns. DDP uses
# the cores better if, with the cores free, it gains at every width. It is wrong only on the
# claim's kind of machine: two or more sockets, cores free, and no width gaining (though the
# ranks here are not bound to a socket's cores and memory each, as the guide binds them).
# Anything else leaves the claim depending on the machine and the model.
# The key figure is the width that decided: the weakest gain (holds, depends), or with no
# width gaining, the one nearest to a gain (wrong).
gains = [c for c in speedups if c["outcome"] == "above"]
deciding = (min(speedups, key=lambda c: c["low"]) if gains
            else max(speedups, key=lambda c: c["high"]))
RULE = ("holds if, with the cores free (other processes below 0.25 cores), two DDP "
        "ranks make a step >1.05x faster than one process on the same cores (interval "
        "above 1.05) at every layer width; wrong if, on two or more sockets with the "
        "cores free, at none; depends otherwise (on the model, on one socket on the "
        "machine, and on other processes)")
decision = decide(device, [("holds", {"cores free": True, "speed-up": "all above"}),
                           ("wrong", {"two or more sockets": True, "cores free": True,
                                      "speed-up": "none above"}),
                           ("depends", {})],
                  groups={"speed-up": speedups},
                  facts={"cores": cores, "sockets": sockets, "NUMA nodes": numa_nodes,
                         "two or more sockets": bool(sockets and sockets >= 2),
                         "ranks": world_size, "threads per rank": threads,
                         "other processes (cores)": others, "cores free": free},
                  key=deciding)
report(decision, RULE)
skipped = []
if not sockets or sockets < 2:
    skipped.append(f"two or more sockets (one DDP rank per socket, bound to its cores "
                   f"and memory): not measured on this machine: needs two sockets "
                   f"({sockets or 'unknown'} here)")
RESULT = {"rule": RULE, "verdicts": {"cpu": decision}, "measurements": [],
          "skipped": skipped}

# %%
# When not to use it
# ------------------
# On one socket, a model whose ops are big enough to split gains little from more processes
# and pays an all-reduce per step; several processes also hold several copies of the model,
# its gradients and optimizer state. Give each rank ``cores // ranks`` threads
# (``OMP_NUM_THREADS``; ``torchrun`` sets it to 1 when it starts several processes and the
# variable is unset): ranks whose threads add up to more than the cores slow each other
# down. On several sockets, bind each rank to its
# socket (``numactl --cpunodebind=N --membind=N``), as the guide shows.

"""
DDP with ``find_unused_parameters=True``: declare layers in the order they run
==============================================================================

PyTorch's *Performance Tuning Guide* ("Match the order of layers in constructors and during
the execution if using ``DistributedDataParallel(find_unused_parameters=True)``", claim S5-9):

    "To maximize the amount of overlap, the order in model constructors should roughly match
    the order during the execution."

``DistributedDataParallel`` (DDP) all-reduces gradients in *buckets*, and starts a bucket's
all-reduce as soon as all its gradients exist, while ``backward()`` still computes the rest.
Buckets are filled in the reverse of the order in which ``__init__`` registers the parameters,
on the guess that this is the order ``backward()`` produces their gradients. The guide adds
that with ``find_unused_parameters=False`` (the default) DDP re-forms its buckets in the
order the gradients really arrive, so the order only matters with ``True``. This tip trains
the same layers, registered in the order ``forward()`` runs them and in reverse, in two
processes on the CPU (the ``gloo`` backend; this page's process is rank 0, a child process
rank 1). It records when each bucket's all-reduce starts, checks that both models compute
the same gradients, and times a training step as the batch grows.
"""
# sphinx_gallery_tips_claims = ["S5-9"]
# sphinx_gallery_tips_tags = ["distributed", "training", "module-design"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "With find_unused_parameters=True, DDP buckets follow the constructor's order: reversed layers delay every all-reduce to the end of backward."
# sphinx_gallery_tips_keywords = ["find_unused_parameters", "DistributedDataParallel", "bucket", "bucket_cap_mb", "all-reduce overlap", "layer order", "unused parameters", "DDP slow"]
# sphinx_gallery_tips_errors = ["RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This error indicates that your module has parameters that were not used in producing loss."]
# sphinx_gallery_tips_related = ["tip_ddp_no_sync_accumulation", "tip_module_conventions"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html", "https://docs.pytorch.org/docs/stable/notes/ddp.html", "https://docs.pytorch.org/docs/stable/ddp_comm_hooks.html", "https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, anti-pattern time / recommended time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import (TwoRanks, compare_times, cores_were_free, cpu_ticks, decide,
                            free_port, plot_ratios, report)


# %%
# Setup
# -----
# Two ranks. Overlap needs a core for the communication while the backward pass computes, so
# each rank gets the cores left after one per rank as intra-op threads (at least one: on a
# machine of two cores, nothing is left over). ``TwoRanks`` starts the other rank as a fresh
# ``python`` process and passes calls to it; a rank that fails, or does not answer within
# 120 s, fails this page with its error output.
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

world_size = 2
cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
         else os.cpu_count())
threads = max(1, (cores - world_size) // world_size)  # a core per rank left to gloo
spare = max(0, cores - world_size * threads)
device = torch.device("cpu")  # gloo on the CPU; several GPUs are not measured here
gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(f"cores: {cores}, ranks: {world_size}, threads per rank: {threads}, "
      f"cores left for communication: {spare}, torch {torch.__version__}")


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# Eight linear layers, and a head that ``forward()`` uses only when asked (a step without an
# auxiliary loss): a parameter left without a gradient is why a model needs
# ``find_unused_parameters=True``. ``InOrder`` registers the layers in the order ``forward()``
# runs them; ``Reversed`` registers the same layers (same weights) last to first, like a
# model whose ``__init__`` defines its decoder before its encoder. ``bucket_cap_mb=0.5`` puts
# about two layers in a bucket, so this small model has several buckets, as a large model
# has with the default 25 MiB. The functions and classes below are what every rank runs:
# this page's process calls them as rank 0, and ``TwoRanks`` sends their source to a fresh
# Python process, rank 1, which calls them when rank 0 asks (a fresh interpreter, not a
# fork: forking a process whose OpenMP threads are running can hang), so both ranks run the
# same calls in the same order. ``join`` returns a rank's state, which every other function
# takes first. Each rank trains on its own batches.
WIDTH, DEPTH, BUCKET_MB = 256, 8, 0.5


class InOrder(nn.Module):
    """Recommended: __init__ registers the layers in the order forward() runs them."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)  # the same weights in both models, and on every rank
        self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(DEPTH))
        self.aux_head = nn.Linear(WIDTH, 1)  # used in some steps only

    def run_order(self):
        return list(self.layers)

    def forward(self, x, use_aux=False):
        for layer in self.run_order():
            x = layer(x).relu()
        return self.aux_head(x) if use_aux else x


class Reversed(InOrder):
    """Anti-pattern: the same layers registered last to first; run first to last."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(self.layers[::-1])

    def run_order(self):
        return list(self.layers)[::-1]


def wrap(name, find_unused_parameters=True):
    """A fresh model of kind ``name`` in DDP."""
    model = {"reversed": Reversed, "in order": InOrder}[name]()
    return DDP(model, find_unused_parameters=find_unused_parameters,
               bucket_cap_mb=BUCKET_MB)


def join(rank, world_size, port, threads):
    """Join the process group; both DDP models, their optimizers, this rank's data."""
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=60))
    models = {name: wrap(name) for name in ("reversed", "in order")}
    return {"models": models,
            "optimizers": {name: torch.optim.SGD(m.parameters(), lr=0.01)
                           for name, m in models.items()},
            "gen": torch.Generator().manual_seed(rank), "data": {}}


def batch(me, size):  # [size, WIDTH]
    if size not in me["data"]:
        me["data"][size] = torch.randn(size, WIDTH, generator=me["gen"])
    return me["data"][size]


def step(me, name, size):
    model, optimizer = me["models"][name], me["optimizers"][name]
    model(batch(me, size)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def same_gradients(me, size):
    """Both models' gradients after one backward, layer by layer in run order."""
    grads = {}
    for name, model in me["models"].items():
        model(batch(me, size)).square().mean().backward()
        grads[name] = [p.grad.clone() for layer in model.module.run_order()
                       for p in layer.parameters()]
        me["optimizers"][name].zero_grad()
    pairs = zip(grads["reversed"], grads["in order"])
    return all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in pairs)


def error_without_the_flag(me):
    """Two steps of a model with an unused head and find_unused_parameters=False:
    the first sentence of the error DDP raises (None if it raises none)."""
    model = wrap("in order", find_unused_parameters=False)
    try:
        for _ in range(2):
            model(batch(me, 8)).square().mean().backward()
    except RuntimeError as err:
        return str(err).split(". ")[0] + "."
    return None


def gradients_after_first_allreduce(me, name, find_unused_parameters):
    """In the third step of a fresh DDP model: the gradients backward() computed
    after the first all-reduce started, and all the gradients it computed."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import (
        allreduce_hook)

    model = wrap(name, find_unused_parameters)
    events = []  # "grad" or "all-reduce", in the order backward() ran them

    def stamp(grad):  # runs as each gradient is computed
        events.append("grad")

    def logging_hook(state, bucket):  # runs as each bucket's all-reduce starts
        events.append("all-reduce")
        return allreduce_hook(state, bucket)

    for p in model.parameters():
        p.register_hook(stamp)
    model.register_comm_hook(None, logging_hook)
    for _ in range(3):  # without find_unused_parameters: re-buckets after step 1
        events.clear()
        # every parameter gets a gradient when the head is used
        out = model(batch(me, 8), use_aux=not find_unused_parameters)
        out.square().mean().backward()
        model.zero_grad()
    first = events.index("all-reduce")
    return [events[first:].count("grad"), events.count("grad")]


def leave(me):
    dist.destroy_process_group()


# %%
# Check: the same gradients, and when the all-reduces start
# ----------------------------------------------------------
# First the two ranks start. Both models compute the same function, so
# their gradients must agree layer by layer, on both ranks. Without
# ``find_unused_parameters=True``, the head that gets no gradient makes DDP fail at the next
# step (on torch 2.13: ``RuntimeError: Expected to have finished reduction in the prior
# iteration before starting a new one``): that is why such a model needs the flag. Then a
# fresh model of each kind logs, through a communication hook and a hook on every
# parameter, the order in which ``backward()`` computes gradients and starts all-reduces:
# the gradients computed after the first all-reduce started are the part of the backward
# pass that communication can overlap. The all-reduces *start early* when more than half of
# the gradients remain to be computed.
port = free_port()
ranks = TwoRanks(join, world_size, port, threads, leave=leave,
                 env={"OMP_NUM_THREADS": str(threads), "CUDA_VISIBLE_DEVICES": ""})
both = ranks.both

same = all(both(same_gradients, 8))
assert same, "the two models' gradients differ"
error = both(error_without_the_flag)[0]
print("without find_unused_parameters=True, the second step raises:", error)
early = {}
for name in ("in order", "reversed"):
    for unused in (True, False):
        after, total = both(gradients_after_first_allreduce, name, unused)[0]
        early[name, unused] = after > total / 2
        print(f"{name}, find_unused_parameters={unused}: {after} of {total} gradients "
              "computed after the first all-reduce started")

# %%
# Measurement
# -----------
# One timed call is one training step (forward, backward with its all-reduces, optimizer) on
# both ranks; rank 0 times it, and since every all-reduce waits for both ranks, its time is
# the step's. The batch grows from 4 to 256 samples per rank: the computation grows with it,
# the communication (2 MiB of gradients) does not. Speed-up = step time with the reversed
# layers / step time with the layers in order.
sizes = [4, 16, 64, 256]


def timed(name, size):
    return lambda: both(step, name, size)


speedups, spans = [], []
try:
    for size in sizes:
        before = cpu_ticks()
        speedups.append(compare_times(
            f"layers in order, {size} samples per rank",
            {"reversed": timed("reversed", size), "in order": timed("in order", size)},
            threshold=1.05, device=device, x=size, budget_s=0.5))
        spans.append((before, cpu_ticks()))
finally:
    ranks.close()

# Overlap needs cores: the cores count as free only if no batch size's timing saw other
# processes use a quarter of a core (rank 1, a child of this process, is not counted).
others, free = cores_were_free(spans, cores)
print("other processes' CPU use while timing, cores (busiest batch size):", others)

# %%
# Where it pays
# -------------
# Above 1.0 the model declared in execution order trains faster. The overlap can hide at most
# the shorter of the communication and the rest of the backward pass, and only where the
# communication has a core of its own to run on.
fig = plot_ratios({"layers in order vs reversed": speedups},
                  xlabel="samples per rank (log scale)",
                  title=f"DDP find_unused_parameters=True, {world_size} ranks (gloo)")

# %%
# Verdict
# -------
# The claim is about a mechanism (the order decides how early the all-reduces start) and its
# effect (more overlap, a faster step). The mechanism is measured directly: "the order
# matters" when, with ``find_unused_parameters=True``, the all-reduces of the model in order
# start early and those of the reversed one do not. A batch size *gains* when the interval
# of its speed-up lies above 1.05, and gains *less than 5%* when it lies below (which is not
# the same as slower); a gain counts only with the cores free, since other processes on them
# stall both ranks at every all-reduce.
# If the order does not change when the all-reduces start, the advice is wrong; if it does
# but the step is not faster here, it depends on whether communication can run beside the
# computation (spare cores, or GPUs with NCCL).
order_matters = early["in order", True] and not early["reversed", True]
RULE = ("holds if, with find_unused_parameters=True, the layers in order start their "
        "all-reduces early (more than half of the gradients still to compute) and the "
        "reversed layers do not, and, with the cores free (other processes below 0.25 "
        "cores), a step is >1.05x faster in order (interval above 1.05) at one or more "
        "batch sizes and clearly not (interval below 1.05) at none; wrong if the order "
        "does not change when the all-reduces start; depends otherwise (on whether the "
        "overlap saves time here)")
decision = decide(device, [("wrong", {"order matters": False}),
                           ("holds", {"order matters": True, "cores free": True,
                                      "speed-up": "any above",
                                      "every size": "none below"}),
                           ("depends", {})],
                  groups={"speed-up": speedups, "every size": speedups},
                  facts={"order matters": order_matters,
                         "same gradients": same,
                         "without the flag, step 2 raises": error is not None,
                         "in order: all-reduces start early": early["in order", True],
                         "reversed: all-reduces start early": early["reversed", True],
                         "reversed, find_unused_parameters=False: all-reduces start "
                         "early": early["reversed", False],
                         "ranks": world_size, "threads per rank": threads,
                         "cores left for communication": spare,
                         "other processes (cores)": others, "cores free": free},
                  key=speedups[-1])
report(decision, RULE)
skipped = [f"CUDA (NCCL, one GPU per rank): not measured on this machine: needs 2 GPUs "
           f"({gpus} here); this page runs DDP on the CPU with gloo"]
RESULT = {"rule": RULE, "verdicts": {"cpu": decision}, "measurements": [],
          "skipped": skipped}

# %%
# When not to use it
# ------------------
# Reordering only matters with ``find_unused_parameters=True``: without it DDP re-forms its
# buckets after the first step in the order the gradients arrived (the measurement above
# with ``False``). So first ask whether the model needs the flag at all: it also costs a
# traversal of the autograd graph every step, and DDP warns when it finds no unused
# parameter ("find_unused_parameters=True was specified in DDP constructor, but did not
# find any unused parameters in the forward pass"). ``static_graph=True`` is another way out
# for a model whose unused parameters are the same every step. Where one step's
# communication is small next to its computation, or the communication has no spare core or
# link to run on, the order changes little.

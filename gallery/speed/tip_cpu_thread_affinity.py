"""
CPU affinity: bind OpenMP threads to cores
==========================================

PyTorch's *Performance Tuning Guide* ("Utilize OpenMP", claim S5-4):

    "CPU affinity setting controls how workloads are distributed over multiple cores. It
    affects communication overhead, cache line invalidation overhead, or page thrashing, thus
    proper setting of CPU affinity brings performance benefits."

It sets, for GNU OpenMP (the one PyTorch uses by default), ``OMP_SCHEDULE=STATIC``,
``OMP_PROC_BIND=CLOSE`` and ``GOMP_CPU_AFFINITY="N-M"``, which bind each OpenMP thread to one
core for the life of the process. OpenMP reads them once, when PyTorch loads it, so they must
be in the environment before ``import torch``; ``os.sched_setaffinity(0, cores)`` restricts
the calling thread, and every thread it starts afterwards, to a set of cores (on Linux it
does not move threads that already exist, so it too comes first). This tip starts two fresh
Python processes that differ only in those settings, runs the same training steps in both,
alternating, and checks that the threads really were bound. The benefits the guide names
need a machine where placement matters: many cores sharing caches, or several sockets each
with its own memory. The machine that builds this site's CPU pages has two cores on one
socket, so this page says below what such a measurement can and cannot show.
"""
# sphinx_gallery_tips_claims = ["S5-4"]
# sphinx_gallery_tips_tags = ["threads"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.0"
# sphinx_gallery_tips_takeaway = "Bind OpenMP threads (OMP_PROC_BIND, GOMP_CPU_AFFINITY) before torch starts; what it gains depends on sockets and on other processes."
# sphinx_gallery_tips_keywords = ["CPU affinity", "OMP_PROC_BIND", "GOMP_CPU_AFFINITY", "KMP_AFFINITY", "sched_setaffinity", "core pinning", "numactl", "taskset", "OpenMP"]
# sphinx_gallery_tips_related = ["tip_cpu_threads", "tip_cpu_ddp_gloo"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/docs/stable/notes/cpu_threading_torchscript_inference.html", "https://docs.python.org/3/library/os.html#os.sched_setaffinity", "https://gcc.gnu.org/onlinedocs/libgomp/GOMP_005fCPU_005fAFFINITY.html"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, anti-pattern time / recommended time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import (Peer, compare_times, decide,
                            plot_ratios, report)


# %%
# Setup
# -----
# Both processes get one OpenMP thread per core this page may use. ``Peer`` starts a fresh
# ``python`` process and passes calls to it; a process that fails, or does not answer within
# 120 s, fails this page with its error output. The sockets, NUMA nodes and whether the
# machine is a virtual one are read from Linux's ``/proc`` and ``/sys``.
import os

import torch
import torch.nn.functional as F

device = torch.device("cpu")
allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
cores = len(allowed) or os.cpu_count()
AFFINITY_VARIABLES = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY",
                      "KMP_AFFINITY", "OMP_SCHEDULE")


def machine():
    """Sockets, NUMA nodes, and whether the CPU reports a hypervisor (a virtual
    machine); None where Linux's files are missing."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            info = fh.read().splitlines()
        nodes = [d for d in os.listdir("/sys/devices/system/node")
                 if d.startswith("node")]
    except OSError:
        return None, None, None
    sockets = {line.split(":")[1] for line in info if line.startswith("physical id")}
    virtual = any(line.startswith("flags") and " hypervisor" in line for line in info)
    return max(1, len(sockets)), max(1, len(nodes)), virtual


sockets, numa_nodes, virtual = machine()
print(f"cores: {cores} {allowed}, sockets: {sockets}, NUMA nodes: {numa_nodes}, "
      f"virtual machine: {virtual}, torch {torch.__version__}")


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The functions both processes run. ``Peer`` starts a fresh Python process, calls ``start``
# there, and sends it the source of each function it is asked to run, with what that
# function uses. ``start`` in the process told to bind (``bind_cores``) first restricts it to
# those cores with ``os.sched_setaffinity``, then (as the guide's ``export`` lines would) puts
# the OpenMP variables in its environment, all before ``import torch``. The other process
# leaves placement to the operating system. Either way it then prepares a model, runs
# training steps, and reports which of its threads are bound to a single core (Linux's
# ``/proc``).
BATCH, DEPTH = 64, 2


def start(bind_cores, threads):
    """Bind to ``bind_cores`` (if any) before torch starts; this process's state."""
    if bind_cores:  # recommended: bind before torch (and OpenMP) start
        os.sched_setaffinity(0, bind_cores)  # this process runs on these cores only
        os.environ["OMP_SCHEDULE"] = "STATIC"
        os.environ["OMP_PROC_BIND"] = "CLOSE"  # threads stay where they start
        # thread i: i-th core
        os.environ["GOMP_CPU_AFFINITY"] = ",".join(map(str, bind_cores))
    import torch  # after the environment is set

    torch.set_num_threads(threads)
    return {"runs": {}}


def prepare(me, width):
    torch.manual_seed(0)
    layers = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    x, y = torch.randn(BATCH, width), torch.randn(BATCH, width)  # [BATCH, width]
    me["runs"][width] = (model, torch.optim.SGD(model.parameters(), lr=0.01), x, y)
    with torch.no_grad():
        return model(x).double().sum().item()  # the same in both processes


def train_steps(me, width, steps):
    model, optimizer, x, y = me["runs"][width]
    for _ in range(steps):
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()


def threads_on_one_core(me):
    """This process's threads, and how many may run on one core only (Linux)."""
    if not os.path.isdir("/proc/self/task"):
        return [0, 0]
    found = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as fh:
                allowed = next(line for line in fh
                               if line.startswith("Cpus_allowed_list"))
        except (OSError, StopIteration):
            continue
        found.append("," not in allowed and "-" not in allowed)
    return [len(found), sum(found)]


# %%
# Check: the same results, and the threads really bound
# -----------------------------------------------------
# First the two processes start. Binding moves
# threads, not arithmetic: both processes must compute the same outputs. Then
# each reports its threads that may run on one core only: in the bound process the OpenMP
# threads (the main thread among them), in the free one none.
env = {k: v for k, v in os.environ.items() if k not in AFFINITY_VARIABLES}
env.update(OMP_NUM_THREADS=str(cores), CUDA_VISIBLE_DEVICES="")
free = Peer(start, [], cores, env=env, inherit=False)  # env is the whole environment
bound = Peer(start, allowed, cores, env=env, inherit=False)

widths = [64, 128, 256, 512]
for width in widths:
    assert free.call(prepare, width) == bound.call(prepare, width)
free.call(train_steps, widths[0], 1)
bound.call(train_steps, widths[0], 1)  # the OpenMP threads exist from here on
on_one_core = {"free": free.call(threads_on_one_core),
               "bound": bound.call(threads_on_one_core)}
for name, (total, pinned) in on_one_core.items():
    print(f"{name}: {pinned} of {total} threads may run on one core only")
really_bound = on_one_core["bound"][1] >= cores and on_one_core["free"][1] == 0

# %%
# Measurement
# -----------
# One timed call is a few training steps of a 2-layer model on a batch of 64 (8 steps at
# width 64, one from width 256), so that no call is tiny. The processes take turns, so each
# has the cores to itself while it runs. The widths grow from ops too small for PyTorch to
# split across threads (the element-wise ones below 32,768 outputs) to ones that split
# well. Speed-up = free time / bound time. Each timing records how much CPU other processes
# took while it ran.
speedups = []
try:
    for width in widths:
        steps = max(1, 2**15 // width**2)
        speedups.append(compare_times(
            f"bound threads, width {width}",
            {"free": lambda: free.call(train_steps, width, steps),
             "bound": lambda: bound.call(train_steps, width, steps)},
            threshold=1.05, device=device, x=width, budget_s=0.5, cores=cores))
finally:
    free.close()
    bound.close()

# Other processes' CPU use, in cores, during the busiest width's timing (the two
# children are this process's and are not counted). A bound thread cannot move off a
# core another process is using; a free one can. A width whose timing saw others use
# a quarter of a core makes the verdict "busy" (compare_times records it, decide
# reads it).
loads = [c["cores"]["others"] for c in speedups]
others = None if not loads or None in loads else max(loads)
cores_free = None if others is None or cores < 2 else others < 0.25
print("other processes' CPU use while timing, cores (busiest width):", others)

# %%
# Where it pays
# -------------
# Above 1.0 the bound threads train faster.
fig = plot_ratios({"bound vs free OpenMP threads": speedups},
                  xlabel="layer width (log scale)", ylabel="free time / bound time",
                  title=f"Training steps, {cores} OpenMP threads on {cores} cores")

# %%
# Verdict
# -------
# A width *gains* when the interval of its speed-up lies above 1.05, and gains *less than 5%*
# when it lies below (which is not the same as slower). Both need the cores free: with other
# processes on them, a parallel region waits whenever one of its threads is descheduled, and
# a call can take many times its usual time in either process, so such a run shows how
# binding copes with a busy machine, not what it gains. Binding holds if the threads really
# were bound, the cores were free, and it gains at some width and clearly gains less than 5%
# at none. It is wrong only where the guide's reasons can act and nothing interfered: two or
# more NUMA nodes, cores free, threads bound, and no width gaining (though these models, a
# few MiB of weights at most, test the caches more than the memory of the other socket).
# Anything else leaves the claim depending on the machine.
#
# What a machine of two cores on one socket can show: whether binding two threads to them
# changes the time of a training step, with and without other processes on those cores. What it
# cannot show: memory traffic between sockets (page thrashing), caches shared by some cores
# and not others, and, on a virtual machine, physical cores at all: a "core" there is a
# virtual CPU that the hypervisor itself places, so binding a thread to it does not bind the
# thread to a physical core.
RULE = ("holds if, with the OpenMP threads bound and the cores free (other processes "
        "below 0.25 cores), bound threads make a training step >1.05x faster (interval "
        "above 1.05) at one or more widths and clearly not (interval below 1.05) at "
        "none; wrong if, with the threads bound, the cores free and two or more NUMA "
        "nodes, at none; depends otherwise (on the machine, and on other processes)")
decision = decide(device, [("holds", {"threads bound": True, "cores free": True,
                                      "speed-up": "any above",
                                      "every width": "none below"}),
                           ("wrong", {"threads bound": True,
                                      "two or more NUMA nodes": True,
                                      "cores free": True, "speed-up": "none above"}),
                           ("depends", {})],
                  groups={"speed-up": speedups, "every width": speedups},
                  facts={"threads bound": really_bound,
                         "threads on one core, bound process": on_one_core["bound"][1],
                         "threads on one core, free process": on_one_core["free"][1],
                         "cores": cores, "sockets": sockets, "NUMA nodes": numa_nodes,
                         "two or more NUMA nodes": bool(numa_nodes and numa_nodes >= 2),
                         "virtual machine": virtual,
                         "other processes (cores)": others, "cores free": cores_free},
                  key=speedups[-1])
report(decision, RULE)
skipped = []
if not numa_nodes or numa_nodes < 2:
    skipped.append(f"two or more sockets or NUMA nodes (the page thrashing the guide "
                   f"names): not measured on this machine: needs two NUMA nodes "
                   f"({numa_nodes or 'unknown'} here)")
RESULT = {"rule": RULE, "verdicts": {"cpu": decision}, "measurements": [],
          "skipped": skipped}

# %%
# When not to use it
# ------------------
# Binding is for a machine whose cores a job has to itself. Where other processes share the
# cores (a desktop, a shared server, a container without a dedicated ``cpuset``), a bound
# thread waits for its core while a free one would move to an idle one. Bind each process to
# its own cores, never two processes to the same ones: ``GOMP_CPU_AFFINITY="0-3"`` in two
# processes puts both first threads on core 0. The variables do nothing after OpenMP has
# started (``torch.set_num_threads`` cannot bind). Intel's OpenMP (``libiomp5``, loaded with
# ``LD_PRELOAD``) is bound with ``KMP_AFFINITY``, the guide's setting for it, which takes
# precedence there over ``GOMP_CPU_AFFINITY``. For several sockets, the guide's
# ``numactl --cpunodebind=N --membind=N`` also keeps each process's memory on its socket.

"""
``torch.cuda.memory_allocated`` counts CUDA tensors, not the step's peak
========================================================================

The article's first tip, "Memory usage" (claim S1-1), is one call::

    torch.cuda.memory_allocated(device)

"We can add this command for each iteration, after forward pass, and so on", for example::

    print("Begin: {}".format(torch.cuda.memory_allocated(device)))
    model.to(device)
    print("1 - After model to device: {}".format(torch.cuda.memory_allocated(device)))

It reports the bytes held by tensors in PyTorch's CUDA caching allocator, so the claim is about
CUDA and only a GPU can decide it. There this tip checks two things: that the reading grows by
exactly the bytes of the tensors created (a model's parameters, at four widths), and whether
readings taken after forward, backward and the update, as the article suggests, catch the
step's peak, which is what runs out of memory. On a CPU the call raises no error and counts
nothing; there the tip shows what measures CPU memory instead, and decides nothing.
"""
# sphinx_gallery_tips_claims = ["S1-1"]
# sphinx_gallery_tips_tags = ["tracking", "cuda", "device"]
# sphinx_gallery_tips_devices = ["cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "1.8.1"
# sphinx_gallery_tips_takeaway = "On CUDA memory_allocated counts live tensors; read between steps it can miss the peak that max_memory_allocated catches. CPU: use torch.profiler."
# sphinx_gallery_tips_rules = ["PTT027"]
# sphinx_gallery_tips_keywords = ["torch.cuda.memory_allocated", "max_memory_allocated", "reset_peak_memory_stats", "profile_memory", "memory usage", "out of memory", "nvidia-smi"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.cuda.memory_allocated.html", "https://pytorch.org/docs/stable/torch_cuda_memory.html", "https://pytorch.org/docs/stable/profiler.html"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). Memory is
# measured, not computed: exact byte counts of live tensors on the CPU, the CUDA caching
# allocator's own counters on a GPU. Each comparison pairs the anti-pattern with the
# recommended pattern, one pair per round (here: per step count or size), as a difference or a
# ratio; the interval is a ~95% confidence interval for its median (with 5 rounds or fewer,
# their whole range). A verdict is the first case of the rule whose conditions the
# measurements meet.
from tipsite.tipkit import compare_values, decide, plot_series, report


# %%
# Setup
# -----
# Two-layer MLPs. A training step is forward, backward and a plain SGD update, with a probe
# after each part where the article would print ``memory_allocated``.
import torch

torch.manual_seed(0)
torch.set_num_threads(1)  # nothing is timed; one thread keeps small ops from stalling
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

WIDTHS = [256, 512, 1024, 2048]  # models for the parameter count: 0.5 to 32 MiB
STEP_WIDTH = 512
BATCHES = {"cpu": [64, 256, 1024, 4096], "cuda": [256, 1024, 4096, 16384]}[device.type]


def make_model(width):
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, width))


def train_step(model, x, probe):
    model.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    probe("after forward")
    loss.backward()
    probe("after backward")
    with torch.no_grad():
        for p in model.parameters():
            p -= 1e-3 * p.grad
    probe("after the update")


# %%
# The article's pattern, run as written
# -------------------------------------
# Its two print lines, verbatim, run on CUDA. Without CUDA the call raises no error: it
# reports the CUDA allocator, which holds nothing, whatever the process allocates; the tip
# does not call it there.
def article_snippet(model):
    print("Begin: {}".format(torch.cuda.memory_allocated(device)))  # noqa: UP032
    model.to(device)
    print("1 - After model to device: {}".format(  # noqa: UP032
        torch.cuda.memory_allocated(device)))


model = make_model(WIDTHS[-1])
param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
if torch.cuda.is_available():
    article_snippet(model)
else:
    print("no CUDA: the article's lines are not run")
    print("(torch.cuda.memory_allocated would count none of this)")
print(f"parameters on {device}: {param_bytes / 2**20:.1f} MiB")
del model


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The article reads ``memory_allocated`` "after forward pass, and so on": between the parts
# of a step. The recommended gauge is the step's peak: ``reset_peak_memory_stats()``, the
# step, ``max_memory_allocated()``, on CUDA only. On the CPU the same step runs under
# ``torch.profiler`` with ``profile_memory=True``: the peak of the running total of each
# op's allocations is what the CPU allocator held above the step's start.
from torch.profiler import ProfilerActivity, profile


def article_readings(model, x):
    begin = torch.cuda.memory_allocated(device)
    readings = []

    def probe(where):
        readings.append(torch.cuda.memory_allocated(device) - begin)

    train_step(model, x, probe)
    return readings


def step_peak(model, x):
    if device.type == "cuda":  # the torch.cuda counters see CUDA memory only
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        begin = torch.cuda.memory_allocated(device)
        train_step(model, x, lambda where: None)
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - begin
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        train_step(model, x, lambda where: None)
    total = top = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        total += event.self_cpu_memory_usage
        top = max(top, total)
    return top


# %%
# Check: the reading counts the tensors created (CUDA)
# ----------------------------------------------------
# For each width, the growth of ``memory_allocated`` when the model moves to the GPU against
# the exact bytes of its parameters (the allocator rounds each block up to 512 bytes, far
# below 1% here): the fact "counts the parameters' bytes" is whether all four agree within
# 1%.
skipped, facts = [], {}
if torch.cuda.is_available():
    counted = []
    for width in WIDTHS:
        cpu_model = make_model(width)
        exact = sum(p.numel() * p.element_size() for p in cpu_model.parameters())
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        cuda_model = cpu_model.to(device)
        counted.append((width, torch.cuda.memory_allocated(device) - before, exact))
        del cpu_model, cuda_model
    for width, reading, exact in counted:
        print(f"width {width:5d}: memory_allocated grew by {reading / 2**20:8.3f} MiB, "
              f"parameters {exact / 2**20:8.3f} MiB")
    facts["counts the parameters' bytes"] = all(
        abs(reading - exact) <= 0.01 * exact for _, reading, exact in counted)
else:
    print("Skipped: counting CUDA tensors needs CUDA (no CUDA device in this build)")

# %%
# Measurement: the readings against the step's peak
# --------------------------------------------------
# At each batch size, one step with the article's readings and one with the peak counter
# (on the CPU: the profiler). Every measured step starts without gradients, so the readings
# include them; a first step warms up the allocator and cuBLAS's workspace. During backward
# the activations and their gradients are alive together, which readings between the parts
# of a step may miss.
model = make_model(STEP_WIDTH).to(device)
warm_up = torch.randn(BATCHES[0], STEP_WIDTH, device=device)  # [batch, width]
train_step(model, warm_up, lambda where: None)
largest_reading, peak = [], []
for batch in BATCHES:
    x = torch.randn(batch, STEP_WIDTH, device=device)  # [batch, width]
    if torch.cuda.is_available():
        model.zero_grad(set_to_none=True)
        largest_reading.append(max(article_readings(model, x)))
    model.zero_grad(set_to_none=True)
    peak.append(step_peak(model, x))
    del x
if not torch.cuda.is_available():
    skipped.append("CUDA: memory_allocated against parameter bytes and against "
                   "max_memory_allocated: no CUDA device in this build")

peak_name = "max_memory_allocated" if device.type == "cuda" else "torch.profiler peak"
print(f"{'batch':>6}  {'largest reading':>16}  {peak_name:>22}")
for i, batch in enumerate(BATCHES):
    reading = (f"{largest_reading[i] / 2**20:12.2f} MiB" if largest_reading
               else f"{'-':>16}")
    print(f"{batch:6d}  {reading}  {peak[i] / 2**20:18.2f} MiB")

missed = []
if torch.cuda.is_available():
    missed = [compare_values(f"step peak / largest reading, batch {b}",
                             {"max_memory_allocated": [p / 2**20],
                              "largest memory_allocated reading": [r / 2**20]},
                             threshold=1.1, device=device, metric="memory",
                             unit="MiB", x=b)
              for b, p, r in zip(BATCHES, peak, largest_reading)]

# %%
# What each tool sees, by batch size
# ----------------------------------
series = {f"step peak ({peak_name})": (BATCHES, [p / 2**20 for p in peak])}
if largest_reading:
    series["largest memory_allocated reading (after forward, backward, update)"] = (
        BATCHES, [r / 2**20 for r in largest_reading])
fig = plot_series(series, xlabel="batch size (samples)",
                  ylabel="memory above the step's start (MiB)",
                  title=f"One training step of a width-{STEP_WIDTH} MLP", device=device,
                  logx=True)

# %%
# Verdict
# -------
# Decided on CUDA only. The reading holds as a gauge if it counts tensors exactly and, read
# where the article reads it, is within 10% of the step's peak at every batch size.
RULE = ("CUDA only: holds if memory_allocated(device) grows by the parameters' "
        "bytes (within 1%) at every width and its largest reading after forward, "
        "backward and the update is within 10% of max_memory_allocated at every batch "
        "size; depends if it counts the bytes but the peak is more than 10% above the "
        "readings at some batch size; wrong if it does not count the parameters' bytes")
verdicts = {}
if torch.cuda.is_available():
    decision = decide(device,
                      [("wrong", {"counts the parameters' bytes": False}),
                       ("holds", {"peak above the readings": "none above"}),
                       ("depends", {})],
                      groups={"peak above the readings": missed}, facts=facts,
                      key=missed[-1])
    report(decision, RULE)
    verdicts[device.type] = decision
else:
    print("Verdict on CUDA: not measured (no CUDA device in this build)")
    print("No verdict on the CPU: the claim is about CUDA memory")
RESULT = {"rule": RULE, "verdicts": verdicts, "measurements": [], "skipped": skipped}

# %%
# When not to use it
# ------------------
# On CUDA, ``memory_allocated`` is the right gauge of live tensors, but a reading between the
# parts of a step misses the transient peak inside backward or the optimizer step: call
# ``reset_peak_memory_stats()`` before the step and read ``max_memory_allocated()`` after it,
# as above. ``nvidia-smi`` shows more than either: the caching allocator's reserve
# (``memory_reserved()``) and the CUDA context. On the CPU use ``torch.profiler`` with
# ``profile_memory=True`` or the process's resident memory; the ``torch.cuda`` functions there
# read 0 without an error.

"""
Gradient accumulation: a larger batch in less memory, if the loss is scaled
===========================================================================

The article's seventh tip (claim S1-7):

    "Update weights for every other `x` batch to mimic the larger batch size."

and its example loop steps the optimizer every second batch::

    if (i+1) % 2 == 0 or (i+1) = len(data):

The advice, on its merits: summing the gradients of k micro-batches and stepping once should
give the step of one k-times larger batch, while only one micro-batch's activations are alive
at a time. With a loss averaged over the batch (``reduction="mean"``) that needs each
micro-batch loss divided by k, and layers that see the whole batch, like BatchNorm, see a
smaller one. This tip runs the article's loop as printed, then measures each of these: whether
one accumulated step equals the larger batch's step, and the peak activation memory against the
number of micro-batches.
"""
# sphinx_gallery_tips_claims = ["S1-7"]
# sphinx_gallery_tips_tags = ["training", "optimizer"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "2.3"
# sphinx_gallery_tips_takeaway = "With loss / k, k accumulated micro-batches give the k-times batch's step at one micro-batch's activation memory; not with BatchNorm."
# sphinx_gallery_tips_keywords = ["gradient accumulation", "accumulate gradients", "large batch", "loss / accumulation_steps", "BatchNorm", "out of memory", "GradScaler", "micro-batch"]
# sphinx_gallery_tips_related = ["tip_mixed_precision", "tip_zero_grad_set_to_none"]
# sphinx_gallery_tips_rules = ["PTT024"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). Facts are
# what the tip observed on this device (an error raised, two optimizer steps equal or not).
# Memory is compared from exact byte counts: the ratio, larger batch / accumulated micro-batches,
# is compared with the rule's threshold. A verdict is the first case of the rule whose
# conditions the measurements meet.
from tipsite.tipkit import compare_values, decide, plot_series, report


# %%
# Setup
# -----
# An MLP regression. One CPU thread: nothing here is timed, and small ops stall less on a busy
# machine with one.
import weakref

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

WIDTH = {"cpu": 256, "cuda": 512}[device.type]
criterion = torch.nn.MSELoss()  # reduction="mean"


def make_model(batchnorm=False):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(WIDTH, WIDTH)]
    if batchnorm:
        layers.append(torch.nn.BatchNorm1d(WIDTH))
    layers += [torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
               torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
               torch.nn.Linear(WIDTH, 1)]
    return torch.nn.Sequential(*layers).to(device)


def batches(n, rows):
    """n batches of [rows, WIDTH] features and [rows, 1] targets, as from a loader."""
    return [(torch.randn(rows, WIDTH), torch.randn(rows, 1)) for _ in range(n)]


# %%
# The article's loop, as printed
# ------------------------------
# ``(i+1) = len(data)`` is an assignment inside an expression: Python rejects the whole loop
# before running a single line.
ARTICLE_LOOP = """\
model.train()
# 6) Reset the gradients to None
optimizer.zero_grad(set_to_none = True)

scaler = GradScaler()

for i, (features, target) in enumerate(data):
  # 4) non blocking and overlapping
  features = features.to('cuda:0', non_blocking = True)
  target = target.to('cuda:0', non_blocking = True)

  # 5) forward pass with mixed precision
  with torch.cuda.amp.autocast():
    output = model(features)
    loss = criterion(output, target)

  # Backward pass without mixed precision
  scaler.scale(loss).backward()

  # 7) Only update weights every other two iterations
  if (i+1) % 2 == 0 or (i+1) = len(data):
    # scaler.step() first unscales the gradients.
    # If this gradients contain infs or Nans, optimizer.step() is skipped
    scaler.step(optimizer)

    # If optimizer.step() was skipped, scaling factor is reduced by the backoff_factor
    # in GradScaler()
    scaler.update()

    # Reset the gradient to None
    optimizer.zero_grad(set_to_none = True)
"""
try:
    compile(ARTICLE_LOOP, "article_loop", "exec")
    compiles = True
except SyntaxError as err:
    compiles = False
    print(f"The article's loop does not compile: {type(err).__name__}: {err.msg}")
    print(f"  line {err.lineno}: {err.text.strip()}")


# %%
# The article's loop with ``==``
# ------------------------------
# The same logic with the typo fixed, the current ``torch.amp`` APIs and the device chosen at
# run time. ``loss_scale`` is the article's 1 unless a caller passes ``1 / 2``; ``amp=False``
# runs it in float32 so that two steps can be compared tightly.
def article_loop(model, optimizer, data, loss_scale=1.0, amp=True):
    scaler = torch.amp.GradScaler(device.type, enabled=amp and device.type == "cuda")
    model.train()
    optimizer.zero_grad(set_to_none=True)
    steps = 0
    for i, (features, target) in enumerate(data):
        features = features.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        with torch.amp.autocast(device.type, enabled=amp):
            output = model(features)
            loss = criterion(output, target) * loss_scale
        scaler.scale(loss).backward()
        if (i + 1) % 2 == 0 or (i + 1) == len(data):
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            steps += 1
    return steps


data = batches(5, 32)
model = make_model()
steps = article_loop(model, torch.optim.SGD(model.parameters(), lr=1e-3), data)
print(f"fixed loop: {len(data)} batches, {steps} optimizer steps, "
      f"under autocast({device.type!r})")


# %%
# Check: does one accumulated step equal the larger batch's step?
# ---------------------------------------------------------------
# Two micro-batches (the article's "every other") against one batch holding both, from the same
# initial weights and optimizer: the parameter change of one step, compared as a relative
# difference over all parameters. Equal means within 1%, far above float32 rounding and far
# below a wrong scale.
def step_change(model, optimizer, run):
    before = [p.detach().clone() for p in model.parameters()]
    run(model, optimizer)
    after = [p.detach() for p in model.parameters()]
    return torch.cat([(a - b).flatten() for a, b in zip(after, before)])


def relative_difference(a, b):
    return ((a - b).norm() / b.norm()).item()


micro = batches(2, 32)  # two micro-batches of 32 rows
whole = [tuple(torch.cat(parts) for parts in zip(*micro))]  # one batch of 64 rows
optimizers = {"SGD": lambda ps: torch.optim.SGD(ps, lr=1e-2),
              "Adam": lambda ps: torch.optim.Adam(ps, lr=1e-3)}
cases = {  # name: (optimizer, BatchNorm, loss scale)
    "as printed (no 1/k), SGD": ("SGD", False, 1.0),
    "as printed (no 1/k), Adam": ("Adam", False, 1.0),
    "loss / k, SGD": ("SGD", False, 1 / 2),
    "loss / k, BatchNorm model": ("SGD", True, 1 / 2),
}
facts = {"article's loop compiles as printed": compiles}
for name, (opt, bn, scale) in cases.items():
    m = make_model(bn)
    big = step_change(m, optimizers[opt](m.parameters()),
                      lambda mod, o: article_loop(mod, o, whole, amp=False))
    m = make_model(bn)
    acc = step_change(m, optimizers[opt](m.parameters()),
                      lambda mod, o: article_loop(mod, o, micro, scale, amp=False))
    diff = relative_difference(acc, big)
    size = acc.norm().item() / big.norm().item()
    facts[f"{name}: same step as the 2x batch"] = diff < 0.01
    if name == "as printed (no 1/k), SGD":
        facts[f"{name}: step size / the 2x batch's"] = round(size, 2)
    print(f"{name:28s} step differs from the 2x batch's by {diff:8.2%}, "
          f"size {size:.3f}x")


# %%
# Measurement: peak activation memory against the number of micro-batches
# ------------------------------------------------------------------------
# One optimizer step of an effective batch of k·m rows, taken as one batch or as k accumulated
# micro-batches of m rows. On CUDA: the allocator's peak during the step, above what was
# allocated before it (model, gradients kept from a warm-up step, data). On the CPU: the peak of
# the bytes autograd keeps for backward, counted exactly: every saved tensor passes a pack hook
# and is counted until autograd frees it.
class SavedBytes:
    """Live and peak bytes of the tensors autograd saves, parameters left out."""

    class Box:
        __slots__ = ("__weakref__", "tensor")

        def __init__(self, tensor):
            self.tensor = tensor.detach()  # no grad_fn: no cycle keeping the box alive

    def __init__(self, model):
        self.skip = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.live, self.now, self.peak = {}, 0, 0

    def pack(self, t):
        box = self.Box(t)
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in self.skip:
            if ptr not in self.live:
                self.live[ptr] = [storage.nbytes(), 0]
                self.now += storage.nbytes()
                self.peak = max(self.peak, self.now)
            self.live[ptr][1] += 1
            weakref.finalize(box, self.release, ptr)
        return box

    def release(self, ptr):
        self.live[ptr][1] -= 1
        if self.live[ptr][1] == 0:
            self.now -= self.live.pop(ptr)[0]


def one_step(model, optimizer, parts):
    optimizer.zero_grad(set_to_none=False)  # keep the gradients, not activations
    for x, y in parts:
        (criterion(model(x), y) / len(parts)).backward()
    optimizer.step()


def peak_mib(model, optimizer, parts):
    if device.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        one_step(model, optimizer, parts)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    meter = SavedBytes(model)
    with torch.autograd.graph.saved_tensors_hooks(meter.pack, lambda box: box.tensor):
        one_step(model, optimizer, parts)
    return meter.peak / 2**20


metric = {"cuda": "peak CUDA memory above model and data",
          "cpu": "peak bytes saved for backward"}[device.type]
rows = {"cpu": 32, "cuda": 128}[device.type]  # m, rows per micro-batch
ks = [1, 2, 4, 8, 16]
model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
one_step(model, optimizer, [(torch.randn(rows, WIDTH, device=device),
                             torch.randn(rows, 1, device=device))])  # warm-up
big_mib, acc_mib, memory = [], [], []
for k in ks:
    x = torch.randn(k * rows, WIDTH, device=device)  # [k·m, WIDTH]
    y = torch.randn(k * rows, 1, device=device)  # [k·m, 1]
    # k micro-batches [m, WIDTH], [m, 1], copied out as a loader would deliver them
    parts = [(a.clone(), b.clone()) for a, b in zip(x.split(rows), y.split(rows))]
    big_mib.append(peak_mib(model, optimizer, [(x, y)]))
    acc_mib.append(peak_mib(model, optimizer, parts))
    print(f"k={k:2d}: one batch of {k * rows:4d} rows {big_mib[-1]:7.2f} MiB, "
          f"{k:2d} micro-batches of {rows} rows {acc_mib[-1]:6.2f} MiB")
    if k > 1:
        memory.append(compare_values(
            f"memory, one batch / {k} micro-batches",
            {"one batch": [big_mib[-1]], f"{k} micro-batches": [acc_mib[-1]]},
            threshold=1.2, device=device, metric=metric, unit="MiB", x=k))

# %%
# Where it pays
# -------------
fig = plot_series({f"one batch of k·{rows} rows": (ks, big_mib),
                   f"k accumulated micro-batches of {rows} rows": (ks, acc_mib)},
                  xlabel="k, micro-batches per optimizer step (effective batch k·m)",
                  ylabel=f"{metric} (MiB)", logx=True, device=device,
                  title=f"One optimizer step, {WIDTH}-wide MLP")
fig.axes[0].set_xticks(ks, [str(k) for k in ks])
fig.axes[0].set_ylim(bottom=0)

# %%
# Verdict
# -------
# The advice, accumulate the gradients of k micro-batches to get a k-times batch in less
# memory, is judged on the loop written correctly: each loss divided by k, on a model without
# BatchNorm. It holds if that gives the larger batch's step and keeps less memory at every k
# measured; it depends if memory is saved only at some k. The article's own code is judged in
# the facts above, not in the verdict: whether its loop compiles as printed, and the step its
# unscaled loss gives (about k times the larger batch's with SGD), and what BatchNorm does.
RULE = ("wrong if k micro-batches with loss / k (no BatchNorm) do not give the k-times "
        "batch's step, or keep no less memory (ratio above 1.2 at no k); holds if they "
        "give that step and keep less memory at every k (ratio above 1.2); depends "
        "otherwise (less memory at some k only)")
decision = decide(
    device,
    [("wrong", {"loss / k, SGD: same step as the 2x batch": False}),
     ("wrong", {"memory": "none above"}),
     ("holds", {"loss / k, SGD: same step as the 2x batch": True,
                "memory": "all above"}),
     ("depends", {})],
    groups={"memory": memory}, facts=facts, key=memory[1])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": [], "skipped": []}

# %%
# When not to use it
# ------------------
# Divide each micro-batch loss by the number of micro-batches (by rows, when the last one is
# smaller, as in the article's ``(i+1) == len(data)`` branch). Without it, SGD takes a k-times
# step while Adam, which normalises the gradient's scale, barely changes, as measured above;
# gradient clipping thresholds shift too. With BatchNorm, accumulation only approximates the
# larger batch: its statistics come from each micro-batch. Use GroupNorm or LayerNorm there
# when the batch size matters. And when the larger batch fits in memory, it needs no
# accumulation at all.

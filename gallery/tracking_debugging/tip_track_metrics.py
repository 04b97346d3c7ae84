"""
Track gradients, learning rate and weights, starting with ``logging``
=====================================================================

The article's second lesson (claim S0-2):

    "We all track the training and validation losses. However, some more commonly tracked
    metrics are gradients, validation metrics, learning rates, hardware utilisation, and model
    weights."

    "The easiest place to start is using the `logging` module."

This tip does exactly that, offline: a small classifier trains for a few hundred steps under a
learning-rate schedule while the standard ``logging`` module writes loss, per-layer gradient
norms, learning rate, weight norm, validation accuracy and memory to a file. The log is parsed
back. Then a bug is injected (a layer whose ReLUs are all dead) and we ask which tracked signal
gives it away. Finally, what tracking costs is timed against how often it logs: each logged
step reads several numbers back from the device and writes a line.
"""
# sphinx_gallery_tips_claims = ["S0-2"]
# sphinx_gallery_tips_tags = ["tracking", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "Logged per-layer gradient norms expose a dead layer that loss and accuracy hide. Logging every step slows a small model; every few dozen steps, hardly."
# sphinx_gallery_tips_keywords = ["logging", "gradient norm", "learning rate", "lr scheduler", "weight norm", "validation accuracy", "monitoring", "dead ReLU", "matplotlib"]
# sphinx_gallery_tips_docs = ["https://docs.python.org/3/library/logging.html", "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, anti-pattern time / recommended time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import compare_times, decide, plot_ratios, report


# %%
# Setup
# -----
# Imbalanced binary classification (about 3 positives to 1 negative) from a random teacher,
# and a 3-layer MLP. One CPU thread: the model is too small to split across threads, and on a
# busy machine extra threads only wait on each other.
import logging
import os
import re
import shutil
import tempfile

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

F, STEPS, BATCH = 20, 120, 64
teacher = torch.randn(F, device=device)  # [F]
X = torch.randn(4096, F, device=device)  # [N, F]
y = ((X @ teacher) > -0.7 * teacher.norm()).long()  # [N], ~76% ones
X_val, y_val = X[-1024:], y[-1024:]  # [1024, F], [1024]
X_train, y_train = X[:-1024], y[:-1024]
print(f"positive fraction: {y.float().mean().item():.2f}")


def make_model(dead_layer=False):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(F, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 2))
    if dead_layer:
        # The injected bug: a bias init typo (-10 for 0) kills every ReLU of layer 0.
        nn.init.constant_(model[0].bias, -10.0)
    return model.to(device)


def rss_mib():
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            kib = next(int(ln.split()[1]) for ln in fh if ln.startswith("VmRSS:"))
        return kib / 1024
    except (OSError, StopIteration):
        return float("nan")


# %%
# Tracking with ``logging``
# -------------------------
# One logger, one file handler, one line per logged step in a fixed ``key=value`` format, so
# the file is both human-readable and parseable. Gradient norms are taken after
# ``backward()`` and before ``step()``, per layer, because a single global norm can hide one
# silent layer.
LINEARS = (0, 2, 4)  # indices of the Linear layers in the Sequential
tmp = tempfile.mkdtemp()


def open_log(name):
    logger = logging.getLogger(f"tips.track.{name}")
    logger.setLevel(logging.INFO)
    logger.propagate = False  # keep the lines out of the root logger's console output
    handler = logging.FileHandler(os.path.join(tmp, f"{name}.log"), mode="w")
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    return logger, handler


def log_metrics(step, model, loss, lr):
    """One log line: loss, LR, per-layer gradient norms, weight norm, memory."""
    grads = " ".join(f"grad_norm_{i}={model[i].weight.grad.norm().item():.6g}"
                     for i in LINEARS)
    w_norm = torch.sqrt(sum((p.detach() ** 2).sum() for p in model.parameters())).item()
    line = (f"step={step} loss={loss.item():.5f} lr={lr:.6g} {grads} "
            f"weight_norm={w_norm:.5f} rss_mib={rss_mib():.1f}")
    if torch.cuda.is_available():
        line += f" cuda_mib={torch.cuda.memory_allocated(device) / 2**20:.1f}"
    return line


def train(name, dead_layer, steps=STEPS):
    logger, handler = open_log(name)
    model = make_model(dead_layer)
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    g = torch.Generator(device="cpu").manual_seed(2)
    for step in range(steps):
        idx = torch.randint(0, X_train.shape[0], (BATCH,), generator=g).to(device)
        loss = nn.functional.cross_entropy(model(X_train[idx]), y_train[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        line = log_metrics(step, model, loss, sched.get_last_lr()[0])
        if step % 20 == 0 or step == steps - 1:
            model.eval()
            with torch.no_grad():
                acc = (model(X_val).argmax(-1) == y_val).float().mean().item()
            model.train()
            line += f" val_acc={acc:.4f}"
        logger.info(line)
        opt.step()
        sched.step()
    logger.removeHandler(handler)
    handler.close()
    return handler.baseFilename


paths = {"healthy": train("healthy", False), "dead layer": train("dead_layer", True)}
with open(paths["healthy"], encoding="utf-8") as fh:
    print("first log lines:")
    for line in fh.readlines()[:2]:
        print("  " + line.rstrip()[:86])


# %%
# Check: which tracked signal reveals the bug?
# --------------------------------------------
# The log is parsed back. A reader watching only the loss and the validation accuracy sees
# both runs learn: the loss falls, and an accuracy near the majority class looks like
# progress. The per-layer gradient norms say otherwise.
def parse(path):
    with open(path, encoding="utf-8") as fh:
        return [{k: float(v) for k, v in re.findall(r"(\w+)=([-\d.e+naif]+)", line)}
                for line in fh]


logs = {name: parse(p) for name, p in paths.items()}
for name, rows in logs.items():
    val = [r["val_acc"] for r in rows if "val_acc" in r]
    print(f"{name:10s}: {len(rows)} lines; loss {rows[0]['loss']:.3f} -> "
          f"{rows[-1]['loss']:.3f}; val acc {val[0]:.3f} -> {val[-1]:.3f}; "
          f"lr {rows[0]['lr']:.3g} -> {rows[-1]['lr']:.3g}")
h, d = logs["healthy"], logs["dead layer"]
d_val = [r["val_acc"] for r in d if "val_acc" in r]
majority = max(y_val.float().mean().item(), 1 - y_val.float().mean().item())
dead_grad = max(r["grad_norm_0"] for r in d)
healthy_grad = min(r["grad_norm_0"] for r in h)
print(f"dead-layer run: final val acc {d_val[-1]:.3f} (majority class: {majority:.3f})")
print(f"layer-0 gradient norm: healthy run min {healthy_grad:.3g}, "
      f"dead-layer run max {dead_grad:.3g}")
facts = {
    "buggy run: loss falls by >5%": d[-1]["loss"] < 0.95 * d[0]["loss"],
    "buggy run: val accuracy above 70%": d_val[-1] > 0.70,
    "buggy run: logged layer-0 grad norm 0 at every step": dead_grad == 0.0,
    "healthy run: logged layer-0 grad norm > 0 at every step": healthy_grad > 0.0,
    "logged LR follows the cosine schedule to ~0": h[-1]["lr"] < 0.01 * h[0]["lr"],
    "buggy run: max logged layer-0 grad norm": dead_grad,
    "healthy run: min logged layer-0 grad norm": healthy_grad,
    "buggy run: final val accuracy": d_val[-1],
}


# %%
# The anti-pattern and the recommended pattern, for the cost
# ----------------------------------------------------------
# Tracking is the advice, so here it is the variant whose cost is measured: ``period(n)``
# trains ``n`` steps, and the tracked version logs the metrics above at the last of them
# (every ``.item()`` waits for the device). The untracked version trains the same ``n`` steps.
def make_period(every, tracked):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    logger, _ = open_log(f"cost_{every}_{tracked}")
    xb, yb = X_train[:BATCH], y_train[:BATCH]  # [BATCH, F], [BATCH]

    def period():
        for i in range(every):
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if tracked and i == every - 1:
                logger.info(log_metrics(i, model, loss, opt.param_groups[0]["lr"]))
            opt.step()

    return period


# %%
# Measurement: what tracking costs, against how often it logs
# -----------------------------------------------------------
# One timed statement is ``n`` training steps, with and without one logged step among them.
intervals = [1, 3, 10, 30]
costs = [compare_times(f"tracking cost, logging every {n} steps",
                       {"tracked": make_period(n, True),
                        "untracked": make_period(n, False)},
                       threshold=1.10, device=device, x=n, budget_s=1.0, max_rounds=16)
         for n in intervals]

# %%
# Where tracking costs
# --------------------
# The time of ``n`` training steps with one logged step among them, over the same steps
# untracked, with its interval.
fig = plot_ratios({"tracked / untracked": costs}, xlabel="steps between logged steps",
                  ylabel="training time, tracked / untracked",
                  title=f"Logging metrics from a {F}-64-64-2 MLP, batch {BATCH}")

# %%
# What the log shows
# ------------------
# The logged metrics of both runs, read back from the log files.
import matplotlib.pyplot as plt

fig2, axes = plt.subplots(2, 2, figsize=(6.4, 4.8), layout="constrained")
for (name, rows), color in zip(logs.items(), ("#0072B2", "#D55E00")):
    steps = [r["step"] for r in rows]
    axes[0, 0].plot(steps, [r["loss"] for r in rows], color=color, label=name)
    axes[0, 1].plot(steps, [r["grad_norm_0"] for r in rows], color=color, label=name)
    axes[1, 0].plot(steps, [r["lr"] for r in rows], color=color, label=name)
    vsteps = [r["step"] for r in rows if "val_acc" in r]
    axes[1, 1].plot(vsteps, [r["val_acc"] for r in rows if "val_acc" in r], "o-",
                    color=color, ms=3, label=name)
axes[0, 1].set_yscale("symlog", linthresh=1e-3)
titles = ("training loss", "layer-0 weight-gradient norm", "learning rate",
          "validation accuracy")
for ax, title in zip(axes.flat, titles):
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    ax.legend(fontsize=7)
fig2.suptitle(f"Read back from the log files; {device.type.upper()}, "
              f"torch {torch.__version__}", fontsize=10)

# %%
# Verdict
# -------
# The claim's reason is that these metrics pinpoint problems, so the facts from the log decide
# whether it holds. The cost decides whether it holds as affordable advice: logging at the
# sparsest interval swept must not cost measurably more than 10% (the interval of its cost
# not above 1.10; inside the noise counts as affordable). The denser intervals are shown,
# not decided on. Logging costs the host (reading values back, formatting, writing), so on
# a GPU every timing counts, host-bound ones too (``about="host"``).
RULE = ("holds if the dead layer looks healthy in loss and accuracy while its logged "
        "layer-0 gradient norm is 0 at every step (non-zero in the healthy run), the "
        f"logged LR follows the schedule, and logging every {intervals[-1]} steps does "
        "not cost measurably more than 10% (interval not above 1.10); wrong if the "
        "logged gradient norms do not reveal the dead layer; depends otherwise. "
        "Logging is the host's cost: on a GPU a host-bound timing counts")
revealed = {"buggy run: logged layer-0 grad norm 0 at every step": True,
            "healthy run: logged layer-0 grad norm > 0 at every step": True}
cases = [("holds", {**revealed, "buggy run: loss falls by >5%": True,
                    "buggy run: val accuracy above 70%": True,
                    "logged LR follows the cosine schedule to ~0": True,
                    "sparsest logging": "none above"}),
         ("wrong", {"buggy run: logged layer-0 grad norm 0 at every step": False}),
         ("depends", {})]
decision = decide(device, cases, facts=facts, key=costs[0],
                  groups={"tracking cost": costs, "sparsest logging": costs[-1:]},
                  about="host")
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

for name in list(logging.Logger.manager.loggerDict):
    if name.startswith("tips.track."):  # close the log files before deleting them
        for handler in list(logging.getLogger(name).handlers):
            logging.getLogger(name).removeHandler(handler)
            handler.close()
shutil.rmtree(tmp, ignore_errors=True)

# %%
# When not to use it
# ------------------
# Each logged step reads numbers back from the device: on a GPU every ``.item()`` waits for
# the queued work. Log every few dozen steps, or accumulate on the device and read once. Once
# runs multiply, a tracker (TensorBoard's ``SummaryWriter``, W&B, MLflow) replaces parsing
# your own files, as the article suggests; the per-layer gradient norms are still yours to
# compute.

"""
How much memory an optimizer's state takes
==========================================

The article sizes the state that optimizers keep per weight (claim S1-2):

    "Many optimizers keep track of parameters such as an estimate of the first and second
    moments of the gradient, for each model weight. For the three main optimizers we have:

    * Adam: twice the model size (which uses two moments)
    * RMSprop: one times the model size (which uses one moment)
    * SGD: zero times the model size (which doesn't uses moments)"

The state lives in ``optimizer.state``, a dict from parameter to a dict of tensors, created
lazily at the first ``step()``. This tip measures it for the three optimizers with their
defaults and with options people commonly switch on (SGD's momentum, RMSprop's ``centered``
and ``momentum``, Adam's ``amsgrad``), at four model sizes, and divides by the parameters'
bytes: exact tensor bytes on the CPU, the memory the first ``step()`` leaves allocated on
CUDA.
"""
# sphinx_gallery_tips_claims = ["S1-2"]
# sphinx_gallery_tips_tags = ["optimizer", "training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "memory"
# sphinx_gallery_tips_min_torch = "1.12"
# sphinx_gallery_tips_takeaway = "Adam/AdamW keep two copies of the weights, RMSprop one, plain SGD none; momentum, centered or amsgrad each add one more copy."
# sphinx_gallery_tips_keywords = ["optimizer.state", "Adam", "AdamW", "RMSprop", "SGD", "momentum_buffer", "exp_avg", "out of memory", "optimizer memory"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/optim.html"]

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
# A two-layer MLP at four widths (larger on a GPU). The multiple state / parameters should
# not depend on the width; the sweep shows whether it does.
import torch

torch.manual_seed(0)
torch.set_num_threads(1)  # nothing is timed; one thread keeps small ops from stalling
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

WIDTHS = {"cpu": [128, 256, 384, 512], "cuda": [512, 1024, 1536, 2048]}[device.type]


def make_model(width):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 10)).to(device)


def nbytes(t):
    return t.numel() * t.element_size()


# %%
# The optimizers, as the article names them and with common options
# -----------------------------------------------------------------
# The last number is the article's multiple of the model size for that optimizer family.
CONFIGS = {
    "SGD()":                  (torch.optim.SGD, {}, 0),
    "SGD(momentum=0.9)":      (torch.optim.SGD, {"momentum": 0.9}, 0),
    "RMSprop()":              (torch.optim.RMSprop, {}, 1),
    "RMSprop(centered=True)": (torch.optim.RMSprop, {"centered": True}, 1),
    "RMSprop(momentum=0.9)":  (torch.optim.RMSprop, {"momentum": 0.9}, 1),
    "Adam()":                 (torch.optim.Adam, {}, 2),
    "Adam(amsgrad=True)":     (torch.optim.Adam, {"amsgrad": True}, 2),
    "AdamW()":                (torch.optim.AdamW, {}, 2),
}
DEFAULTS = ("SGD()", "RMSprop()", "Adam()", "AdamW()")


def after_first_step(cls, kwargs, width):
    """The model, its optimizer after one step, the state's bytes and the step's peak.

    The state is made lazily by the first ``step()``. On CUDA it is what that step
    leaves allocated (gradients exist before it), and the peak includes its
    temporaries; on the CPU it is the exact bytes of the tensors in
    ``optimizer.state`` (no peak).
    """
    model = make_model(width)
    optimizer = cls(model.parameters(), lr=1e-3, **kwargs)
    assert len(optimizer.state) == 0  # nothing is allocated before the first step
    x = torch.randn(32, width, device=device)  # [batch, features]
    model(x).square().mean().backward()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        optimizer.step()
        torch.cuda.synchronize(device)
        state = torch.cuda.memory_allocated(device) - before
        peak = torch.cuda.max_memory_allocated(device) - before
    else:
        optimizer.step()
        state = sum(nbytes(v) for st in optimizer.state.values() for v in st.values()
                    if torch.is_tensor(v))
        peak = None
    return model, optimizer, state, peak


# %%
# Check: what each state entry is
# -------------------------------
# Per-weight buffers have the weight's shape; Adam's and RMSprop's ``step`` counter is a
# 0-dim tensor per parameter tensor (a Python number before torch 1.12), on the CPU unless
# ``capturable`` or ``fused`` is set, so the CUDA allocator does not see it.
model, optimizer, _, _ = after_first_step(torch.optim.Adam, {}, WIDTHS[0])
first = next(iter(model.parameters()))
entry = optimizer.state[first]
for name, value in entry.items():
    print(f"Adam state[{name!r}]: shape {tuple(value.shape)}, {value.dtype}, "
          f"{value.device}")
assert entry["exp_avg"].shape == entry["exp_avg_sq"].shape == first.shape

# %%
# Measurement
# -----------
# State bytes / parameter bytes for every configuration at every width.
param_bytes = [sum(nbytes(p) for p in make_model(w).parameters()) for w in WIDTHS]
state, ratio, keys, peaks = {}, {}, {}, {}
for label, (cls, kwargs, _) in CONFIGS.items():
    state[label], peaks[label] = [], []
    for width in WIDTHS:
        model, optimizer, kept, peak = after_first_step(cls, kwargs, width)
        state[label].append(kept)
        peaks[label].append(peak)
    ratio[label] = [s / p for s, p in zip(state[label], param_bytes)]
    keys[label] = sorted({k for st in optimizer.state.values() for k in st})
    del model, optimizer

print(f"{'optimizer':<23} {'state / parameters at each width':>32} {'claim':>6}")
for label, (_, _, claimed) in CONFIGS.items():
    cells = " ".join(f"{r:7.3f}" for r in ratio[label])
    print(f"{label:<23} {cells:>32} {claimed:5d}x")
print("state keys:")
for label in CONFIGS:
    print(f"  {label:<23} {', '.join(keys[label])}")
if device.type == "cuda":
    print("peak of the first step / parameters, largest width:")
    print("  " + ", ".join(f"{k} {peaks[k][-1] / param_bytes[-1]:.2f}x"
                           for k in DEFAULTS))

# %%
# State against model size
# ------------------------
shown = ("SGD()", "SGD(momentum=0.9)", "RMSprop()", "RMSprop(centered=True)",
         "Adam()", "Adam(amsgrad=True)")
params_mib = [p / 2**20 for p in param_bytes]
fig = plot_series({label: (params_mib, [s / 2**20 for s in state[label]])
                   for label in shown},
                  xlabel="parameters (MiB)",
                  ylabel="optimizer state after one step (MiB)",
                  title="Optimizer state against model size", device=device)

# %%
# Verdict
# -------
# Per configuration, one round per width: how many copies of the parameters its state is
# off the article's multiple (the measured multiple minus the claimed one, unsigned, to a
# thousandth of a copy; the claim's own figure is 0 off). A configuration matches when it is off by less than 0.05
# copies at every width: the 0-dim ``step`` counters and the allocator's 512-byte rounding
# are far below that.
RULE = ("holds if every configuration's state is the article's multiple of the "
        "parameter bytes (off by less than 0.05 copies at every width); depends if the "
        "defaults match but a common option changes it; wrong if a default does not "
        "match")
off = {label: compare_values(f"{label} vs the article's {claimed}x",
                             {"measured": [round(abs(r - claimed), 3)
                                           for r in ratio[label]],
                              "article": [0.0 for _ in ratio[label]]},
                             threshold=0.05, device=device, unit="copies",
                             metric="state / parameters, off the claim",
                             measure="difference")
       for label, (_, _, claimed) in CONFIGS.items()}
decision = decide(device, [("wrong", {"defaults": "any above"}),
                           ("holds", {"common options": "none above"}),
                           ("depends", {})],
                  groups={"defaults": [off[label] for label in DEFAULTS],
                          "common options": [c for label, c in off.items()
                                             if label not in DEFAULTS]},
                  key={"name": "Adam() state / parameter bytes",
                       "value": ratio["Adam()"][-1], "unit": "x"})
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# The article's figures are right for the defaults, and a good first estimate: training with
# Adam needs weights + gradients + 2 moments = 4x the weights before any activation. But the
# multiple follows the options: SGD with momentum keeps one buffer (1x), centered RMSprop
# keeps a gradient average too, RMSprop with momentum a buffer, and amsgrad a running max
# (each +1x). The default ``foreach`` implementations also need temporary memory during
# ``step()`` on top of the state (the CUDA peak above); ``foreach=False`` trades that peak for
# speed.

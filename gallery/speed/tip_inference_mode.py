"""
``inference_mode()`` versus ``no_grad()``
=========================================

The article says ``torch.inference_mode()`` beats ``torch.no_grad()`` by 5-10%, and more as
models grow (claim S0-5):

    "no_grad() mode contains additional heads, like version_counting and view tracking of
    tensors, that increase the computation head by 5-10%."

Both modes switch off graph recording. ``inference_mode`` also skips the two costs the quote
names, on every tensor it creates: a tensor made under it has no version counter (bumped by
every in-place op) and its views carry no view-tracking metadata. Those are fixed costs per
tensor and per op, not per FLOP. So this tip measures two workloads: one made of exactly what
the quote names (a view of each row of a buffer, then an in-place op on it, as a decoder writes
its cache row by row), swept from one-element rows to rows where the arithmetic dominates; and
a plain MLP forward, swept from tiny to large widths, to test "more as models grow".
"""
# sphinx_gallery_tips_claims = ["S0-5"]
# sphinx_gallery_tips_tags = ["autograd", "inference"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "inference_mode saves a fixed cost per tensor (views, in-place ops): large on tiny tensors, gone once each op does real work."
# sphinx_gallery_tips_keywords = ["inference_mode", "no_grad", "torch.inference_mode", "evaluation speed", "version counter", "views"]
# sphinx_gallery_tips_errors = ["RuntimeError: Inference tensors cannot be saved for backward. Please do not use Tensors created in inference mode in computation tracked by autograd."]
# sphinx_gallery_tips_rules = ["PTT019"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, anti-pattern time / recommended time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import calibrate, compare_times, decide, plot_ratios, report


# %%
# Setup
# -----
# On CUDA when there is one, else on the CPU. One CPU thread: the claim is about per-tensor
# bookkeeping, not parallelism, and one thread keeps small ops from stalling on a busy machine.
import torch
from torch.utils.benchmark import Timer

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")


def update_rows(x):
    """Per-tensor work: a view of each row, then an in-place op on that view."""
    y = x * 2.0  # made inside the mode, like any activation
    for i in range(y.shape[0]):
        y[i].mul_(0.5)  # a tracked view; the in-place op bumps its version counter
    return y


def make_model(width, depth=8):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width, device=device), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).eval()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
def run_no_grad(fn, x):
    with torch.no_grad():
        return fn(x)


def run_inference_mode(fn, x):
    with torch.inference_mode():
        return fn(x)


# %%
# Check: same numbers, one real difference
# ----------------------------------------
# Both give identical outputs. The difference is what you may do with the result afterwards:
# a tensor made under ``inference_mode`` cannot be saved for backward later.
model = make_model(64)
x = torch.randn(32, 64, device=device)  # [batch, features]
a, b = run_no_grad(model, x), run_inference_mode(model, x)
torch.testing.assert_close(a, b, rtol=0, atol=0)
torch.testing.assert_close(run_no_grad(update_rows, x),
                           run_inference_mode(update_rows, x), rtol=0, atol=0)
print("outputs identical:", torch.equal(a, b))
print("is_inference():   no_grad ->", a.is_inference(),
      "| inference_mode ->", b.is_inference())

w = torch.ones(64, device=device, requires_grad=True)
try:
    (b * w).sum().backward()
except RuntimeError as err:
    print("using the inference tensor in autograd raises:",
          str(err).splitlines()[0][:36], "...")
else:
    raise AssertionError("expected a RuntimeError: inference tensor saved for backward")

# %%
# Measurement
# -----------
# Row updates: 16 rows, from one element per row (only bookkeeping) to rows where each in-place
# op is real memory traffic. MLP: 8 layers, from tiny widths to widths where each matmul is
# real arithmetic. A GPU needs far larger ops before its work outweighs the host's per-op cost,
# so CUDA gets larger sizes (and a larger MLP batch). Its MLP widths after the tiny one come
# from two measurements of this run: the forward's time at width 16, where the GPU has almost
# nothing to do (the host's time per forward), and this GPU's float32 matmul rate
# (``calibrate``); they make the forward's matmuls take once, 4 and 16 times the host's time
# at that rate (at most 128 per streaming multiprocessor wide), so the sweep reaches widths
# where the GPU, not the host, sets the pace.
rows = 16
row_sizes = {"cpu": [1, 64, 4096, 65536],
             "cuda": [1, 4096, 262144, 4194304]}[device.type]
widths = [4, 32, 256, 2048]
batch = {"cpu": 16, "cuda": 128}[device.type]
if device.type == "cuda":
    calib = calibrate(device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    probe = (make_model(16), torch.randn(batch, 16, device=device))  # [batch, 16]
    host_s = Timer("run(*probe)", globals={"run": run_no_grad, "probe": probe}
                   ).blocked_autorange(min_run_time=0.2).median
    per_width2 = 8 * 2 * batch / calib["matmul_float32"]  # 8 layers, seconds

    def width_for(seconds):  # a multiple of 64 whose matmuls take that long
        return min(128 * sms, max(64, 64 * round((seconds / per_width2) ** 0.5 / 64)))

    widths = sorted({16} | {width_for(k * host_s) for k in (1, 4, 16)})
    print(f"MLP forward at width 16: {host_s * 1e3:.3g} ms; widths: {widths}")

per_tensor = []
for n in row_sizes:
    x = torch.randn(rows, n, device=device)  # [rows, elements per row]
    per_tensor.append(compare_times(
        f"row updates, {n} elements per row",
        {"no_grad": lambda: run_no_grad(update_rows, x),
         "inference_mode": lambda: run_inference_mode(update_rows, x)},
        threshold=1.05, device=device, x=n, budget_s=1.5))

per_model = []
for width in widths:
    model = make_model(width)
    x = torch.randn(batch, width, device=device)  # [batch, features]
    per_model.append(compare_times(
        f"MLP forward, width {width}",
        {"no_grad": lambda: run_no_grad(model, x),
         "inference_mode": lambda: run_inference_mode(model, x)},
        threshold=1.05, device=device, x=width, budget_s=0.5,
        work={"flops": 8 * 2 * batch * width**2, "limit": "matmul_float32"}
        if device.type == "cuda" else None))

# %%
# Where it pays
# -------------
# The speed-up of ``inference_mode`` over ``no_grad`` with its interval: first the row updates
# (what the quote names), then the MLP (what "more as models grow" is about).
fig = plot_ratios({"view + in-place op per row": per_tensor},
                  xlabel="elements per row (log scale)",
                  title=f"Row updates: {rows} rows, a view and an in-place op each")
fig = plot_ratios({"MLP forward": per_model},
                  xlabel="model width, features (log scale)",
                  title=f"8-layer MLP forward, batch {batch}")

# %%
# Verdict
# -------
# The claim promises at least 5% on any workload, more on larger models. A size *gains* when
# the interval of its speed-up lies above 1.05 and clearly does not when it lies below; an
# interval across 1.05 is inside this machine's noise and proves neither. The claim holds
# with a gain at every size, is wrong with a clear non-gain at every size, and depends on the
# workload otherwise. The cost the quote names, version counters and view tracking, is work
# the host does for each tensor, so on a GPU every row-update point counts, host-bound ones
# too (``about`` says "host" for them); "more as models grow" is about the model's work, so on
# a GPU an MLP width decides only where the GPU set the pace, and each point says which bound it.
RULE = ("holds if inference_mode is >5% faster (interval above 1.05) at every size of "
        "both workloads; wrong if its interval lies below 1.05 at every size; depends "
        "otherwise: it pays where per-tensor bookkeeping (views, in-place ops on small "
        "tensors) outweighs the arithmetic. On a GPU the row updates count however "
        "idle the GPU was (the bookkeeping is the host's); an MLP width decides only "
        "if it kept the GPU busy at least half the time")
decision = decide(device, [("holds", {"row updates": "all above", "MLP": "all above"}),
                           ("wrong", {"row updates": "all below",
                                      "MLP": "all below"}),
                           ("depends", {})],
                  groups={"row updates": per_tensor, "MLP": per_model},
                  key=per_tensor[0], about={"row updates": "host", "MLP": "device"})
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# Use ``inference_mode`` for pure inference: it pays most in code that slices and updates
# many small tensors. Do not expect it to speed up a model whose ops are large. Keep
# ``no_grad`` when the outputs may later meet autograd (e.g. targets computed from a frozen
# model during training, or tensors you modify in place and then differentiate): inference
# tensors raise an error there, as shown above.

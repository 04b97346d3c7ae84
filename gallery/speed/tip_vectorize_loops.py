"""
Python loops over a tensor versus one ``torch.max(x, dim=1)``
=============================================================

The article advises against looping over a tensor's rows in Python and recommends a PyTorch
function that works on the whole tensor, e.g. ``torch.max(x, dim=1)`` (claim S3-1):

    "Iteration over a tensor through primitive loops (`for` or `while`) in python is very slow."

The article's example, verbatim::

    x = torch.Tensor([[0, 1, 2, 3],
                      [7, 6, 5, 4]])
    answer = torch.Tensor([3., 7.])

    # Don't
    max_x = torch.empty((2,))
    idx = torch.argmax(x, dim=1)
    for i in range(x.size(0)):
        max_x[i] = x[i, idx[i]]

    # Do
    max_x, _ = torch.max(x, dim=1)

A loop pays Python and dispatcher overhead (microseconds; on a GPU also a kernel launch) for
every row; the vectorised call pays it once. So the gap should grow with the number of rows.
This tip runs the article's code, then its loop generalised to any number of rows, checks that
it equals ``torch.max(x, dim=1).values`` and times both over a sweep of row counts.
"""
# sphinx_gallery_tips_claims = ["S3-1"]
# sphinx_gallery_tips_tags = ["indexing"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.0"
# sphinx_gallery_tips_takeaway = "A Python loop over rows pays per-row overhead; one torch.max(x, dim=1) call is faster from one row up, and the gap grows with rows."
# sphinx_gallery_tips_keywords = ["vectorization", "vectorize", "python loop", "torch.max", "for loop", "row-wise max"]
# sphinx_gallery_tips_rules = ["PTT033"]

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
# On CUDA when there is one, else on the CPU. One CPU thread: the claim is about per-row Python
# overhead, not parallelism, and on a busy machine a two-thread reduction of a few rows can
# stall a whole scheduler slice waiting for its partner.
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")

COLS = 64

# %%
# The article's code, as written
# ------------------------------
# On the CPU, as the article runs it.
x = torch.Tensor([[0, 1, 2, 3],
                  [7, 6, 5, 4]])
answer = torch.Tensor([3., 7.])

# Don't
max_x = torch.empty((2,))
idx = torch.argmax(x, dim=1)
for i in range(x.size(0)):
    max_x[i] = x[i, idx[i]]
loop_answer = max_x.clone()

# Do
max_x, _ = torch.max(x, dim=1)

assert torch.equal(loop_answer, answer) and torch.equal(max_x, answer)
print("article's loop:", loop_answer.tolist(), "| torch.max:", max_x.tolist(),
      "| answer:", answer.tolist())

# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The article's "Don't" loop for any number of rows: per row two indexing ops and one element
# write, each a separate dispatch from Python.


def row_max_loop(x):
    max_x = torch.empty((x.size(0),), device=x.device)  # [rows]
    idx = torch.argmax(x, dim=1)                         # [rows]
    for i in range(x.size(0)):
        max_x[i] = x[i, idx[i]]
    return max_x


def row_max_vectorised(x):
    return torch.max(x, dim=1).values  # [rows]: one call for all rows


# %%
# Check: same result
# ------------------
x = torch.randn(100, COLS, device=device)  # [rows, cols]
torch.testing.assert_close(row_max_loop(x), row_max_vectorised(x), rtol=0, atol=0)
print("loop == torch.max(x, dim=1).values on 100 rows: identical")

# %%
# Measurement
# -----------
# Row counts from one (the loop body runs once) to hundreds. On a GPU every loop iteration also
# launches kernels, so the same row counts already show the effect there; the largest is kept
# moderate because the loop's time grows with it.
row_counts = {"cpu": [1, 8, 64, 512], "cuda": [1, 8, 64, 256]}[device.type]
speedups = []
for rows in row_counts:
    x = torch.randn(rows, COLS, device=device)  # [rows, COLS]
    speedups.append(compare_times(
        f"speed-up at {rows} rows",
        {"loop": lambda: row_max_loop(x),
         "torch.max(dim=1)": lambda: row_max_vectorised(x)},
        threshold=2.0, device=device, x=rows))

# %%
# Where it pays
# -------------
# The speed-up of ``torch.max(x, dim=1)`` over the loop at each row count, with its interval,
# on logarithmic axes: the speed-ups span orders of magnitude.
fig = plot_ratios({"torch.max(x, dim=1) vs loop": speedups},
                  xlabel=f"rows (each {COLS} columns)",
                  ylabel="loop time / torch.max time",
                  title="row-wise max: Python loop vs one call")
fig.axes[0].set_yscale("log")

# %%
# Verdict
# -------
# "Very slow" is a strong word: the loop is very slow at a row count where the vectorised call
# is at least 2x faster (interval above 2.0). At one row there is nothing to iterate over, so
# that point is shown but does not decide. The loop's cost is the host's (one Python iteration
# and one dispatch, on a GPU one launch, per row), so on a GPU every timing counts, host-bound
# ones too (``about="host"``).
RULE = ("holds if torch.max(x, dim=1) is at least 2x faster than the loop at every row "
        "count above 1 (interval above 2.0); wrong if at none; depends otherwise. "
        "The loop's cost is the host's: on a GPU a host-bound timing counts")
decision = decide(device, [("holds", {"more than one row": "all above"}),
                           ("wrong", {"more than one row": "none above"}),
                           ("depends", {})],
                  groups={"more than one row": speedups[1:], "one row": speedups[:1]},
                  key=speedups[2], about="host")
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# A loop is fine when each step depends on the previous one (a recurrence) and there is no
# scan-style op for it, or when it runs over a handful of large chunks rather than many rows:
# then the per-iteration overhead is small next to each chunk's work.

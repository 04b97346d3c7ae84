"""
``torch.from_numpy`` and ``torch.as_tensor`` share memory, ``torch.tensor`` copies
===================================================================================

The article's eighth tip (claim S1-8):

    "Use `torch.from_numpy(numpy_array)` and `torch.as_tensor(others)` instead of
    `torch.tensor`. If both the source device and target device are CPU, `torch.from_numpy`
    and `torch.as_tensor` may not create data copies."

It goes on: for a NumPy array ``from_numpy`` is the faster call, and for a *tensor* of the same
dtype and device ``as_tensor`` may avoid the copy too. ``torch.tensor`` always copies its data.
``torch.from_numpy`` never does: the tensor is a view of the array's buffer. ``torch.as_tensor``
shares when it can (same dtype, same device, a buffer to share) and copies otherwise. This tip
checks each of those cases, then times the conversions on arrays from ten to a million
elements.
"""
# sphinx_gallery_tips_claims = ["S1-8"]
# sphinx_gallery_tips_tags = ["numpy", "data-loading"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "from_numpy (and as_tensor on a same-dtype array or tensor) shares memory; torch.tensor copies, slower at every size, more so as arrays grow."
# sphinx_gallery_tips_keywords = ["from_numpy", "as_tensor", "torch.tensor", "numpy to tensor", "zero-copy", "shares memory", "np.shares_memory"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.from_numpy.html", "https://pytorch.org/docs/stable/generated/torch.as_tensor.html"]
# sphinx_gallery_tips_rules = ["PTT014"]

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
# The claim is about host memory ("source device and target device are CPU"), so this tip
# runs on the CPU whatever the machine has: a NumPy array lives on the host, and moving it to
# a GPU is a copy by definition. One thread: the question is copy or no copy, not
# parallelism, and one thread keeps small calls from stalling on a busy machine.
import warnings

import numpy as np
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}, numpy {np.__version__}")


def shares(array, tensor):
    """True when the tensor's data lies in the array's buffer."""
    return np.shares_memory(array, tensor.numpy())


def same_storage(a, b):
    """True when two tensors start at one address: one buffer, not a copy."""
    return a.data_ptr() == b.data_ptr()


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
array = np.arange(6, dtype=np.float32)  # [6]
copied = torch.tensor(array)      # anti-pattern: always a copy
viewed = torch.from_numpy(array)  # recommended: a view of the array's buffer
as_t = torch.as_tensor(array)     # recommended: a view too (same dtype, CPU)

# %%
# Check: same values, and who sees a write
# ----------------------------------------
torch.testing.assert_close(copied, viewed)
torch.testing.assert_close(as_t, viewed)
array[0] = 100.0
print(f"after array[0] = 100: torch.tensor -> {copied[0].item():g}, "
      f"from_numpy -> {viewed[0].item():g}, as_tensor -> {as_t[0].item():g}")
viewed[1] = -1.0  # and the other way round
print(f"after tensor[1] = -1 via from_numpy: array[1] = {array[1]:g}")
assert copied[0] == 0 and viewed[0] == as_t[0] == 100 and array[1] == -1

# %%
# When each call shares, for arrays and for tensors
# -------------------------------------------------
# ``as_tensor`` on a *tensor* returns that very tensor when dtype and device already match,
# and a converted copy when they differ. ``torch.tensor`` of a tensor copies, and says so.
source = torch.arange(6, dtype=torch.float32)  # [6], a tensor this time
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    tensor_copy = torch.tensor(source)
for w in caught:
    print(f"torch.tensor(a_tensor) warns: {str(w.message).splitlines()[0][:48]}...")
facts = {
    "from_numpy(array) shares": shares(array, viewed),
    "as_tensor(array) shares": shares(array, as_t),
    "torch.tensor(array) shares": shares(array, copied),
    "as_tensor(tensor) is the tensor": torch.as_tensor(source) is source,
    "as_tensor(tensor, float64) shares": same_storage(
        source, torch.as_tensor(source, dtype=torch.float64)),
    "torch.tensor(tensor) shares": same_storage(source, tensor_copy),
}
others = {
    "as_tensor(array, dtype=float64) shares":
        shares(array, torch.as_tensor(array, dtype=torch.float64)),
    "as_tensor(array[::2]) shares (a strided view)":
        shares(array, torch.as_tensor(array[::2])),
}
for name, value in {**facts, **others}.items():
    print(f"{name:<46} {value}")
try:
    torch.from_numpy(array[::-1])
except ValueError as err:
    print("from_numpy(array[::-1]) raises ValueError:", str(err).split(",")[0])
else:
    raise AssertionError("expected negative strides to be rejected")

# %%
# Measurement
# -----------
# Float32 arrays from ten to a million elements. Two comparisons per size: ``torch.tensor``
# (a copy) against ``from_numpy``, and ``as_tensor`` against ``from_numpy`` (the article says
# ``from_numpy`` is the faster call for an array: ``as_tensor`` first inspects its input).
sizes = [10, 1_000, 100_000, 1_000_000]
no_copy, direct = [], []
for n in sizes:
    src = np.random.default_rng(0).standard_normal(n, dtype=np.float32)  # [n]
    no_copy.append(compare_times(
        f"from_numpy over torch.tensor, {n:,} elements",
        {"torch.tensor": lambda: torch.tensor(src),
         "from_numpy": lambda: torch.from_numpy(src)},
        threshold=1.2, device=device, x=n))
    direct.append(compare_times(
        f"from_numpy over as_tensor, {n:,} elements",
        {"as_tensor": lambda: torch.as_tensor(src),
         "from_numpy": lambda: torch.from_numpy(src)},
        threshold=1.2, device=device, x=n))

# %%
# Where it pays
# -------------
# How many times faster ``from_numpy`` is than each other call, with its interval. The copy
# grows with the array; the sharing calls cost the same at every size.
fig = plot_ratios({"torch.tensor / from_numpy": no_copy,
                   "as_tensor / from_numpy": direct},
                  xlabel="array size (float32 elements)", title="NumPy array to tensor",
                  ylabel="other call time / from_numpy time")
fig.axes[0].set_yscale("log")  # the ratios span two orders of magnitude

# %%
# Verdict
# -------
# The claim has two parts: the sharing calls avoid the copy (facts above), and for an array
# ``from_numpy`` is the faster call. A speed-up counts where its interval lies above 1.2
# (20% faster), over ``torch.tensor`` and over ``as_tensor``.
RULE = ("holds if from_numpy and as_tensor share the array, as_tensor returns a "
        "same-dtype tensor itself and copies for another dtype, torch.tensor copies, "
        "and from_numpy is >1.2x faster than torch.tensor and than as_tensor at every "
        "size (interval above 1.2); wrong if from_numpy or as_tensor copies the array "
        "or from_numpy is >1.2x faster than torch.tensor at no size; depends otherwise")
shared = {name: True for name in ("from_numpy(array) shares", "as_tensor(array) shares",
                                  "as_tensor(tensor) is the tensor")}
copies = {name: False for name in ("torch.tensor(array) shares",
                                   "as_tensor(tensor, float64) shares",
                                   "torch.tensor(tensor) shares")}
decision = decide(device, [
    ("holds", {**shared, **copies, "from_numpy over torch.tensor": "all above",
               "from_numpy over as_tensor": "all above"}),
    ("wrong", {"from_numpy(array) shares": False}),
    ("wrong", {"as_tensor(array) shares": False}),
    ("wrong", {"from_numpy over torch.tensor": "none above"}),
    ("depends", {}),
], groups={"from_numpy over torch.tensor": no_copy,
           "from_numpy over as_tensor": direct},
    facts=facts, key=no_copy[1])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}

# %%
# When not to use it
# ------------------
# Sharing is the point and the risk: writes to the array show in the tensor and back, and the
# array stays alive as long as the tensor. Use ``torch.tensor`` (or ``.clone()``) when you
# want an independent copy. ``from_numpy`` rejects negative strides (``array[::-1]``) and
# warns on read-only arrays. ``as_tensor`` with another dtype or device copies, as shown
# above: on the way to a GPU, ``torch.as_tensor(array, device="cuda")`` is a copy anyway, and
# pinned memory with ``non_blocking=True`` is what speeds that copy up.

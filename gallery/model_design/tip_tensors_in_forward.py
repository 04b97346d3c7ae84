"""
Creating tensors inside ``forward()``
=====================================

The README's first bullet (claim S2-1):

    "All the initializations or new tensor creation should only happen in `__init__` method.
    During the `forward()` call, ideally no new tensors should be created from scratch such as
    `torch.zeros()`, `torch.ones()` etc. **Reason:** Violating this can sometimes brake your
    forward pass and end-to-end backprop may become buggy."

A recurrent cell needs a zero initial state in every ``forward``; this tip writes it three
ways: ``torch.zeros(...)`` in ``forward`` (the pattern the README warns about), a buffer made
in ``__init__`` (what it recommends), and ``x.new_zeros(...)`` in ``forward`` (a tensor created
from scratch, but on the input's device and in its dtype). It runs each wherever a caller may
put the model, checks whether gradients still flow through tensors built from computed values,
and times creating the state in ``forward`` against reusing the buffer.
"""
# sphinx_gallery_tips_claims = ["S2-1"]
# sphinx_gallery_tips_tags = ["module-design", "device"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "1.10"
# sphinx_gallery_tips_takeaway = "torch.zeros() in forward breaks on another device or dtype; x.new_zeros() follows the input (cost vs a buffer timed here); torch.tensor() cuts gradients."
# sphinx_gallery_tips_keywords = ["torch.zeros", "new_zeros", "zeros_like", "register_buffer", "device mismatch", "forward", "initial hidden state", "torch.tensor", "torch.stack"]
# sphinx_gallery_tips_errors = ["RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!", "RuntimeError: Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.Tensor.new_zeros.html", "https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_buffer"]
# sphinx_gallery_tips_related = ["tip_register_buffer_parameter", "tip_module_conventions"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). Facts are
# what the tip observed on this device (an error raised, a gradient present or not). The two
# ways to get the initial state are timed in alternating rounds with ``torch.utils.benchmark``;
# each round gives one ratio, creating in ``forward`` / reusing the buffer. The interval is a
# ~95% confidence interval for the median ratio; rounds are added while it straddles the rule's
# threshold. A verdict is the first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import compare_times, decide, plot_ratios, report


# %%
# Setup
# -----
# One CPU thread: the cost in question is one extra small op per call, and one thread keeps
# small ops from stalling on a busy machine.
import warnings

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")


class Cell(nn.Module):
    """An Elman RNN over T steps; subclasses differ only in where h0 comes from."""

    def __init__(self, features, hidden):
        super().__init__()
        self.inp = nn.Linear(features, hidden)
        self.rec = nn.Linear(hidden, hidden, bias=False)
        self.hidden = hidden

    def forward(self, x):  # x: [B, T, features]
        h = self.initial_state(x)  # [B, hidden]
        for t in range(x.shape[1]):
            h = torch.tanh(self.inp(x[:, t]) + self.rec(h))  # [B, hidden]
        return h


# %%
# The anti-pattern and the two fixes
# ----------------------------------
class ZerosInForward(Cell):
    def initial_state(self, x):
        return torch.zeros(x.shape[0], self.hidden)  # default device (CPU) and dtype


class BufferFromInit(Cell):  # the README's fix: made once, moved and cast with it
    def __init__(self, features, hidden):
        super().__init__(features, hidden)
        self.register_buffer("h0", torch.zeros(hidden), persistent=False)  # [hidden]

    def initial_state(self, x):
        return self.h0.expand(x.shape[0], -1)  # [B, hidden], a view of the buffer


class NewZerosInForward(Cell):  # created in forward, from the input's device and dtype
    def initial_state(self, x):
        return x.new_zeros(x.shape[0], self.hidden)


variants = (ZerosInForward, BufferFromInit, NewZerosInForward)

# %%
# Check: where does each model run?
# ---------------------------------
# The caller puts each model on this device in three dtypes, and on ``meta`` (shapes without
# data, as used to plan large models). A model passes a setting when it runs, answers on that
# device in that dtype, and gives the buffer model's numbers.
settings = [(device.type, torch.float32), (device.type, torch.float64),
            (device.type, torch.bfloat16), ("meta", torch.float32)]


def run(cls, where, dtype):
    torch.manual_seed(0)
    model = cls(8, 16).to(where, dtype)
    x = torch.randn(4, 5, 8).to(where, dtype)  # [B, T, features]
    return model(x)  # [B, hidden]


names = [f"{where} {str(dtype).split('.')[1]}" for where, dtype in settings]
print(f"{'':18s}" + "".join(f"{name:>17s}" for name in names))
runs_everywhere = {}
for cls in variants:
    cells, ok_all = [], True
    for where, dtype in settings:
        try:
            out = run(cls, where, dtype)
        except RuntimeError as err:
            cells.append(type(err).__name__)
            ok_all = False
            continue
        ok = out.device.type == where and out.dtype == dtype
        if ok and where != "meta":
            try:
                torch.testing.assert_close(out, run(BufferFromInit, where, dtype))
            except AssertionError:
                ok = False
        ok_all = ok_all and ok
        cells.append("runs" if ok else "wrong result")
    runs_everywhere[cls.__name__] = ok_all
    print(f"{cls.__name__:18s}" + "".join(f"{c:>17s}" for c in cells))
try:
    run(ZerosInForward, device.type, torch.float64)
except RuntimeError as err:
    print(f"ZerosInForward in float64: {str(err)[:60]}")
h = ZerosInForward(8, 16).initial_state(torch.randn(4, 5, 8, device=device))
print(f"torch.zeros() in forward makes the state on {h.device.type} in {h.dtype}, "
      f"for an input on {device.type}")

# %%
# Check: do gradients survive a tensor created from computed values?
# ------------------------------------------------------------------
# The README's other reason, "end-to-end backprop may become buggy": a tensor built with
# ``torch.tensor`` from values computed in ``forward`` is a new leaf, cut from the graph
# (autograd warns only that it converts to a Python number). ``torch.stack`` keeps the graph.
layer = nn.Linear(8, 3).to(device)
x = torch.randn(4, 8, device=device)  # [B, 8]
gradient_flows = {}
for name in ("torch.tensor", "torch.stack"):
    layer.zero_grad(set_to_none=True)
    rows = layer(x)  # [B, 3]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if name == "torch.tensor":
            # [B], a new leaf: the values are copied out of the graph
            norms = torch.tensor([r.norm() for r in rows], device=device)
        else:
            norms = torch.stack([r.norm() for r in rows])  # [B]: still in the graph
    torch.testing.assert_close(norms, rows.norm(dim=1).detach())  # the same values
    if norms.requires_grad:
        norms.sum().backward()
    gradient_flows[name] = layer.weight.grad is not None
    print(f"{name}(...) of per-row norms: gradient reaches the layer: "
          f"{gradient_flows[name]}, warnings: {len(caught)}")

# %%
# Measurement: does creating the state in ``forward`` cost time?
# --------------------------------------------------------------
# ``x.new_zeros`` allocates and fills a fresh ``[B, hidden]`` tensor per call; the buffer is
# only expanded (a view). Forward passes without gradients, from tiny cells (per-op overhead is
# most of the time) to ones where the arithmetic is. Batch 16 on the CPU, 64 on a GPU.
batch, steps = {"cpu": (16, 16), "cuda": (64, 16)}[device.type]
hiddens = {"cpu": [4, 32, 128, 512], "cuda": [32, 128, 512, 1024]}[device.type]
speed = []
for hidden in hiddens:
    torch.manual_seed(0)
    created, reused = NewZerosInForward(hidden, hidden).to(device), BufferFromInit(
        hidden, hidden).to(device)
    reused.load_state_dict(created.state_dict())
    x = torch.randn(batch, steps, hidden, device=device)  # [B, T, hidden]

    def run_created():
        with torch.no_grad():
            return created(x)

    def run_reused():
        with torch.no_grad():
            return reused(x)

    torch.testing.assert_close(run_created(), run_reused())
    speed.append(compare_times(f"created / buffer at hidden {hidden}",
                               {"new_zeros in forward": run_created,
                                "buffer from __init__": run_reused},
                               threshold=1.05, device=device, x=hidden, budget_s=1.5))

# %%
# Where it costs
# --------------
# Above the dashed line, creating the state in ``forward`` would cost more than 5%.
fig = plot_ratios({"new_zeros in forward / buffer": speed},
                  xlabel="hidden size (features = hidden)",
                  title=f"Elman cell, {steps} steps, batch {batch}, forward",
                  ylabel="new_zeros time / buffer time")

# %%
# Verdict
# -------
# "Never create tensors in forward" holds if creating them there breaks or slows a model even
# when done from the input (``new_zeros``), and is wrong if creating them from scratch breaks
# nothing. It depends on *how* they are created if only the default-device, default-dtype
# ``torch.zeros(...)`` and ``torch.tensor`` of computed values break, while ``new_zeros``
# runs everywhere at no measurable cost. Making a tensor per call costs the host an allocation
# and a launch, so on a GPU every timing counts, host-bound ones too (``about="host"``).
RULE = ("wrong if the buffer fix fails somewhere, or if torch.zeros() without "
        "device/dtype runs everywhere and torch.tensor() of computed values keeps "
        "gradients; holds if also x.new_zeros() fails somewhere or is >5% slower than "
        "the buffer at some size (interval above 1.05); depends otherwise. The cost "
        "is the host's (one more allocation and launch per call): on a GPU a "
        "host-bound timing counts")
facts = {
    "torch.zeros() in forward: runs everywhere": runs_everywhere["ZerosInForward"],
    "buffer from __init__: runs everywhere": runs_everywhere["BufferFromInit"],
    "x.new_zeros() in forward: runs everywhere": runs_everywhere["NewZerosInForward"],
    "torch.tensor() of computed values: gradient flows": gradient_flows["torch.tensor"],
    "torch.stack() of computed values: gradient flows": gradient_flows["torch.stack"],
}
decision = decide(
    device,
    [("wrong", {"buffer from __init__: runs everywhere": False}),
     ("wrong", {"torch.zeros() in forward: runs everywhere": True,
                "torch.tensor() of computed values: gradient flows": True}),
     ("holds", {"x.new_zeros() in forward: runs everywhere": False}),
     ("holds", {"speed": "any above"}),
     ("depends", {})],
    groups={"speed": speed}, facts=facts, key=speed[0], about="host")
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": [], "skipped": []}

# %%
# When not to use it
# ------------------
# Tensors whose shape depends on the input (a state per batch row, a mask per sequence length)
# cannot all be made in ``__init__``; create them from the input, with ``x.new_zeros``,
# ``torch.zeros_like`` or ``device=x.device, dtype=x.dtype``, as PyTorch's own ``nn.RNN`` does
# for its default initial state. Build tensors from computed values with ``torch.stack`` or
# ``torch.cat``, never ``torch.tensor``. A buffer is worth it for a constant that is large or
# costly to compute (a positional table, a fixed mask).

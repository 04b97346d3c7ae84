"""
CUDA graphs with ``torch.compile(mode="reduce-overhead")``: small batches only?
===============================================================================

A model whose GPU kernels are short spends its time launching them from Python. CUDA graphs
record the launches once and replay them as one. ``torch.compile`` does this for you with one
argument; its documentation (claim S6-2) says:

    "reduce-overhead" is a mode that reduces the overhead of python with CUDA graphs, useful
    for small batches.

and warns that it can cost memory and that it works "for CUDA only graphs which do not mutate
inputs". This tip compiles the same MLP twice, with the default mode and with
``mode="reduce-overhead"``, and times inference from one sample to batches large enough to keep
the GPU busy, where launches no longer matter. It also runs the trap the mode sets: a CUDA
graph writes every call's output into the same memory, so an output kept from an earlier call
is overwritten. The claim is about CUDA graphs: a machine without CUDA measures nothing here.
"""
# sphinx_gallery_tips_claims = ["S6-2"]
# sphinx_gallery_tips_tags = ["compile", "cuda", "inference"]
# sphinx_gallery_tips_devices = ["cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "reduce-overhead replays CUDA graphs: it pays where kernel launches dominate (small batches); clone outputs you keep, the next call overwrites them."
# sphinx_gallery_tips_keywords = ["torch.compile", "reduce-overhead", "CUDA graphs", "CUDAGraph", "cudagraphs", "kernel launch overhead", "small batch inference", "cudagraph_mark_step_begin", "Error: accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run"]
# sphinx_gallery_tips_errors = ["RuntimeError: Error: accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run. To prevent overwriting, clone the tensor outside of torch.compile() or call torch.compiler.cudagraph_mark_step_begin() before each model invocation."]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/generated/torch.compile.html", "https://docs.pytorch.org/docs/stable/generated/torch.compiler.cudagraph_mark_step_begin.html", "https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-graphs"]
# sphinx_gallery_tips_related = ["tip_torch_compile", "tip_sync_points"]

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
# A 4-layer MLP, 1,024 wide, in inference. The batch sizes grow with the GPU's streaming
# multiprocessors (1 to 16,896 samples on a 132-SM H100): from one sample, where each layer
# is a few microseconds of work behind a launch, to batches that keep every SM busy.
import textwrap

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
on_cuda = device.type == "cuda"
print(f"device: {device}, torch {torch.__version__}")
width, depth = 1024, 4
model = torch.nn.Sequential(*[layer for _ in range(depth) for layer in
                              (torch.nn.Linear(width, width), torch.nn.ReLU())])
model = model.to(device).eval()
skipped = []
if on_cuda:
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    batches = [1, 2 * sms, 128 * sms]  # each compiles (and records) once per mode
    print(f"batch sizes: {batches} ({sms} SMs)")
else:
    skipped.append("all timings: CUDA graphs need a CUDA device; none here")
    print("Skipped:", skipped[-1])


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
# The same inference code compiled twice. Two functions, so that each compiled version keeps
# its own cache (``torch.compile`` caches per function code). ``dynamic=False`` compiles (and,
# with reduce-overhead, records a CUDA graph) once per input shape, as a server with a few
# fixed batch sizes would.
def predict(x):
    with torch.no_grad():
        return model(x)


def predict_for_graphs(x):  # the same code
    with torch.no_grad():
        return model(x)


if on_cuda:
    # anti-pattern: every call launches each kernel from Python
    predict_default = torch.compile(predict, dynamic=False)
    predict_graphed = torch.compile(predict_for_graphs, mode="reduce-overhead",
                                    dynamic=False)  # recommended: replays a CUDA graph


def warm_up(fn, x, calls=3):
    """Compile, then let the CUDA graphs warm up and record; later calls replay them."""
    for _ in range(calls):
        fn(x)
    torch.cuda.synchronize()


# %%
# Check: the same outputs, and the output that the next call overwrites
# ---------------------------------------------------------------------
# Outputs of a CUDA graph live in memory the graph reuses on its next replay. The check keeps
# a copy (``.clone()``) of each output; the trap keeps the output itself across a second call
# and reads it afterwards.
compile_error, facts = None, {}
if on_cuda:
    x = torch.randn(batches[0], width, device=device)  # [batch, features]
    try:
        warm_up(predict_default, x)
        warm_up(predict_graphed, x)
    except Exception as err:  # no Triton for this GPU, no C compiler, ...
        compile_error = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
        print(textwrap.fill(f"torch.compile failed here: {compile_error}", 88))
if on_cuda and compile_error is None:
    eager = predict(x)
    for fn in (predict_default, predict_graphed):
        torch.testing.assert_close(fn(x).clone(), eager, rtol=1e-4, atol=1e-4)
    print("default and reduce-overhead match eager mode (to 1e-4)")

    kept = predict_graphed(x)  # an output kept, not cloned
    expected = kept.clone()
    predict_graphed(torch.randn(batches[0], width, device=device))  # the next call
    try:
        unchanged = torch.equal(kept, expected)
        print("the kept output is still readable; unchanged:", unchanged)
        overwritten = not unchanged
    except RuntimeError as err:
        overwritten = True
        print(textwrap.fill(f"reading it raises RuntimeError: {str(err)[:150]}", 88))
    facts["a kept output is overwritten by the next call"] = overwritten
    # The fix: clone what you keep beyond the next call.
    kept = predict_graphed(x).clone()
    predict_graphed(torch.randn(batches[0], width, device=device))
    torch.testing.assert_close(kept, expected)
    print("a cloned output survives the next call")
    del kept, expected, eager
elif on_cuda:
    skipped.append(f"all timings: torch.compile failed here ({compile_error})")

# %%
# Measurement
# -----------
# Speed-up = time with the default mode / time with reduce-overhead, one ratio per round, at
# each batch size; the same against eager mode for reference. ``torch.utils.benchmark``
# synchronises CUDA around the timed calls.
graph_gain, over_eager = [], []
if on_cuda and compile_error is None:
    for batch in batches:
        x = torch.randn(batch, width, device=device)  # [batch, features]
        warm_up(predict_default, x)
        warm_up(predict_graphed, x)
        for series, name, baseline in ((graph_gain, "default", predict_default),
                                       (over_eager, "eager", predict)):
            series.append(compare_times(
                f"reduce-overhead vs {name}, batch {batch}",
                {name: lambda: baseline(x),
                 "reduce-overhead": lambda: predict_graphed(x)},
                threshold=1.1, device=device, x=batch, budget_s=1.0))

# %%
# Where it pays
# -------------
# Above 1.0 the CUDA-graph version is faster.
if graph_gain:
    fig = plot_ratios({"vs torch.compile default": graph_gain,
                       "vs eager": over_eager},
                      xlabel="batch size (samples, log scale)",
                      ylabel="time of the variant / time with reduce-overhead",
                      title=f"{depth}-layer MLP inference, width {width}")

# %%
# Verdict
# -------
# Decided on CUDA only, against the default compile mode: that isolates what the CUDA graphs
# add. "Useful for small batches" holds if reduce-overhead is >10% faster at the two smallest
# batch sizes and wrong only if it is clearly not at both (an interval across 1.1 is noise:
# depends); the largest (128 per SM) shows whether the gain fades where the GPU is busy, and
# is not part of the rule. The claim is about the host's launch overhead, so points the host bound
# count too.
RULE = ("CUDA only: holds if reduce-overhead is >10% faster than the default mode "
        "(interval above 1.1) at both small batch sizes (1, and 2 per SM); wrong if "
        "it is clearly not (interval below 1.1) at either; depends otherwise, an "
        "interval across 1.1 included")
verdicts = {}
if graph_gain:
    decision = decide(device, [("holds", {"small batches": "all above"}),
                               ("wrong", {"small batches": "all below"}),
                               ("depends", {})],
                      groups={"small batches": graph_gain[:2],
                              "large batches": graph_gain[2:],
                              "vs eager (shown)": over_eager},
                      facts=facts, key=graph_gain[0], about="host")
    report(decision, RULE)
    verdicts[device.type] = decision
else:
    print("Verdict on CUDA: not measured (no CUDA device in this build); none on CPU")
RESULT = {"rule": RULE, "verdicts": verdicts, "measurements": [], "skipped": skipped}

# %%
# When not to use it
# ------------------
# Skip it where the GPU is already busy (large batches, big layers: see how the gain changes
# with the batch size in the figure) and where input shapes keep changing: each new shape
# compiles and records another graph, and the documentation warns that the mode can use more
# memory. It reduces overhead only "for CUDA only graphs which do not mutate inputs"; where it
# cannot, ``TORCH_LOGS=perf_hints`` says why. Clone any output you keep past the next call, or
# read it before that call.

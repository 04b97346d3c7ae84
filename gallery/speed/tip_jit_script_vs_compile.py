"""
Fusing pointwise ops: ``torch.jit.script`` or ``torch.compile``
===============================================================

The Performance Tuning Guide, in the version this site's claims were taken from ("Fuse
pointwise operations", claim S5-2):

    "In the simplest case fusion can be enabled by applying torch.jit.script decorator to
    the function definition"

with its example, a GELU written as five pointwise ops under ``@torch.jit.script``. Fusing
runs such a chain as one kernel, one pass over memory instead of one per op. The guide has
since replaced ``torch.jit.script`` with ``torch.compile`` in that very sentence, and the
TorchScript pages of the PyTorch documentation now open with "TorchScript is deprecated,
please use torch.export instead", and ``torch.jit.script`` itself warns on torch 2.13 and
2.14: "`torch.jit.script` is deprecated. Please switch to `torch.compile` or
`torch.export`." On Python 3.14 and later it says instead that it "is not supported in
Python 3.14+ and may break". This tip runs the guide's ``fused_gelu`` and a longer chain of
15 pointwise ops three ways: eagerly (one kernel per op), scripted, and compiled.
It records the warning ``torch.jit.script`` gives on this torch, whether TorchScript fused
anything (a fusion group in the graph it executed), and how fast each variant is against
eager mode across tensor sizes.
"""
# sphinx_gallery_tips_claims = ["S5-2"]
# sphinx_gallery_tips_tags = ["compile"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "torch.jit.script warns that it is deprecated; torch.compile is the guide's replacement for fusing pointwise chains. See where each pays."
# sphinx_gallery_tips_keywords = ["torch.jit.script", "TorchScript", "torch.compile", "jit", "kernel fusion", "fused_gelu", "DeprecationWarning", "FutureWarning", "torch.jit.script is deprecated"]
# sphinx_gallery_tips_errors = ["DeprecationWarning: `torch.jit.script` is deprecated. Please switch to `torch.compile` or `torch.export`."]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html", "https://docs.pytorch.org/docs/stable/generated/torch.jit.script.html", "https://docs.pytorch.org/docs/stable/generated/torch.compile.html"]
# sphinx_gallery_tips_related = ["tip_torch_compile"]

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
# On CUDA when there is one, else on the CPU. One CPU thread: the question is fusion, not
# parallelism, and one thread keeps timings steady on a busy machine.
import textwrap
import warnings

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")


def fused_gelu(x):
    """The guide's example (it decorates it with ``@torch.jit.script``)."""
    return x * 0.5 * (1.0 + torch.erf(x / 1.41421))


def long_chain(x):
    """15 pointwise ops: a tanh-approximated GELU of x + 0.1, gated, scaled, clamped."""
    y = x + 0.1
    g = 0.5 * y * (1.0 + torch.tanh(0.79788456 * (y + 0.044715 * y * y * y)))
    return torch.clamp(g * torch.sigmoid(x) - 0.25 * x, -4.0, 4.0)


FUNCTIONS = {"guide's GELU": fused_gelu, "longer chain": long_chain}

# %%
# The anti-pattern: ``torch.jit.script``
# --------------------------------------
# Scripting compiles each function's Python source to TorchScript. The warning it gives on
# this torch is caught and shown here: torch 2.13 gives a ``DeprecationWarning`` and 2.14 a
# ``FutureWarning``, with the same message.
scripted, script_error = {}, None
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        for name, fn in FUNCTIONS.items():
            scripted[name] = torch.jit.script(fn)
    except Exception as err:  # e.g. no source to read: typed into a REPL
        script_error = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
        print(textwrap.fill(f"torch.jit.script failed here: {script_error}", 88))
for w in caught:
    print(textwrap.fill(f"{w.category.__name__}: {str(w.message).splitlines()[0]}", 88))
# torch 2.13/2.14 say "deprecated"; on Python 3.14 it says "not supported ... may break"
deprecated = any(issubclass(w.category, (DeprecationWarning, FutureWarning))
                 and any(s in str(w.message) for s in ("deprecated", "not supported"))
                 for w in caught)
print("torch.jit.script reported deprecated:", deprecated)

# %%
# Did TorchScript fuse anything? Its profiling executor first runs a function as it is,
# recording the shapes it sees, then optimises it; three calls get past that. A fused region
# shows in the executed graph as a fusion group (``prim::TensorExprGroup`` or
# ``prim::FusionGroup``).


def fusion_groups(fn, x):
    for _ in range(3):
        fn(x)
    graph = str(torch.jit.last_executed_optimized_graph())
    return graph.count("TensorExprGroup") + graph.count("FusionGroup")


x = torch.randn(4096, device=device)  # [elements]
fused = {name: fusion_groups(fn, x) > 0 for name, fn in scripted.items()}
for name, was_fused in fused.items():
    print(f"TorchScript fused the {name}: {was_fused}")

# %%
# The recommended pattern: ``torch.compile``
# ------------------------------------------
# ``dynamic=True`` compiles one kernel that serves every tensor length, so the sweep below
# compiles each function once. The first call compiles, which takes seconds: see the
# ``torch.compile`` tip for that cost. Where no compiler is available (no C++ compiler for
# the CPU, no Triton for the GPU), the tip says so and times what it can.
compiled, compile_error = {}, None
try:
    for name, fn in FUNCTIONS.items():
        compiled[name] = torch.compile(fn, dynamic=True)
        compiled[name](x)  # the first call traces and compiles
except Exception as err:
    compile_error = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
    compiled = {}
    print(textwrap.fill(f"torch.compile failed on this machine: {compile_error}", 88))

# %%
# Check: all three compute the same thing
# ---------------------------------------
# Fusion changes no formula, but fused code may evaluate ``erf`` and ``tanh`` differently: a
# float32 tolerance is the honest comparison.
for n in (1000, 65536):
    x = torch.randn(n, device=device)  # [elements]
    for name, fn in FUNCTIONS.items():
        for variant in (scripted, compiled):
            if name in variant:
                torch.testing.assert_close(variant[name](x).cpu(), fn(x).cpu())
print("match eager mode: scripted", ", ".join(scripted) or "(none)",
      "| compiled", ", ".join(compiled) or "(none)")

# %%
# Measurement
# -----------
# Speed-up over eager mode (eager time / variant time) at four tensor sizes (three on a GPU),
# from 1 KiB on the CPU, where per-call overhead is all there is, to sizes where the passes
# over the data dominate. A GPU moves memory far faster and runs many blocks at once, so its sizes grow
# with its number of streaming multiprocessors (SMs): from 1 Ki to 512 Ki elements per SM
# (69 M elements on an H100 with 132 SMs).
if device.type == "cuda":
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    sizes = [sms * 2**k for k in (10, 16, 19)]
else:
    sizes = [2**8, 2**11, 2**14, 2**17]
series, skipped = {}, []
for name, fn in FUNCTIONS.items():
    for label, variants in (("torch.jit.script", scripted),
                            ("torch.compile", compiled)):
        if name not in variants:
            continue
        runs = series.setdefault(f"{label}, {name}", [])
        for n in sizes:
            x = torch.randn(n, device=device)  # [elements]
            for _ in range(3):
                variants[name](x)  # warm-up: TorchScript profiles the new shape
            runs.append(compare_times(
                f"{label} over eager, {name}, {n:,} elements",
                {"eager": lambda: fn(x), label: lambda: variants[name](x)},
                threshold=1.1, device=device, x=n, budget_s=0.3, round_s=0.01))
if script_error:
    skipped.append(f"torch.jit.script timings: it failed here ({script_error})")
if compile_error:
    skipped.append(f"torch.compile timings: it failed here ({compile_error})")

# %%
# Where each pays
# ---------------
# Above 1.0 the variant beats eager mode at that size; the dashed line is the rule's 1.1.
fig = plot_ratios(series, xlabel="tensor size (float32 elements, log scale)",
                  ylabel="eager time / variant time",
                  title="Pointwise chains: torch.jit.script and torch.compile vs eager")

# %%
# Verdict
# -------
# The claim recommends an API. Where that API reports itself deprecated and its replacement
# runs, the advice is outdated, whatever the timings. Elsewhere (releases before the
# deprecation) the timings decide: TorchScript fusion should pay most on the two largest
# sizes, where memory traffic dominates. A size *gains* when the interval of its speed-up
# lies above 1.1 and clearly does not when it lies below; in between it is noise. On a GPU
# the two largest sizes judge the fused kernel's memory traffic, so a point the host bound
# does not count there; fewer launches at every size are host work, and count.
script_runs = [c for label, runs in series.items() if label.startswith("torch.jit")
               for c in runs]
large = [c for c in script_runs if c["x"] in sizes[-2:]]
RULE = ("outdated if torch.jit.script warns that it is deprecated and torch.compile "
        "runs here; otherwise holds if scripting makes both functions >10% faster than "
        "eager (interval above 1.1) at the two largest sizes; wrong if it is below 1.1 "
        "at every size of both; depends otherwise")
cases = [("outdated", {"torch.jit.script deprecated": True,
                       "torch.compile runs": True}),
         ("holds", {"script, two largest sizes": "all above"}),
         ("wrong", {"script, every size": "all below"}),
         ("depends", {})]
facts = {"torch.jit.script deprecated": deprecated,
         "torch.compile runs": compile_error is None,
         **{f"TorchScript fused the {name}": v for name, v in fused.items()}}
verdicts = {}
if script_runs:
    groups = {"script, two largest sizes": large, "script, every size": script_runs}
    compile_runs = [c for label, runs in series.items() if label.startswith("torch.co")
                    for c in runs]
    if compile_runs:
        groups["compile, every size"] = compile_runs
    decision = decide(device, cases, groups=groups, facts=facts, key=script_runs[-1],
                      about={"script, two largest sizes": "device",
                             "script, every size": "host"})
    report(decision, RULE)
    verdicts[device.type] = decision
RESULT = {"rule": RULE, "verdicts": verdicts, "measurements": [], "skipped": skipped}

# %%
# When not to use it
# ------------------
# Keep existing TorchScript code only where a TorchScript consumer needs it (a C++
# deployment loading ``torch.jit.save`` files), and plan its move: for new code use
# ``torch.compile`` to fuse, and ``torch.export`` to ship a model without Python. Compiling
# costs seconds on the first call and a guard check on every call, so it can lose on small
# tensors (see the left of the figure) and on code run only a few times. Where TorchScript
# fused nothing (the lines "TorchScript fused the ..." above say whether it did here), scripting
# a pointwise function only changes who dispatches the same per-op kernels.

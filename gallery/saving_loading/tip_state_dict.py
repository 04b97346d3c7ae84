"""
Save the ``state_dict``, not the pickled model
==============================================

The article's advice (claim S2-3):

    "Do not save models with `torch.save(model)`, that may become incompaitable with different
    torch versions and may take more memory. Save `torch.save(model.state_dict())` instead."

``torch.save(model)`` pickles the module object. Pickle stores classes *by reference*: the
module path and name of your model's class and of every ``torch.nn`` layer inside it, plus
each module's attributes as this torch version lays them out. Loading needs all of them
importable under the same names, with code that still fits the saved attributes. A
``state_dict`` is a dict from parameter names to tensors. This tip saves both, then loads both
after three things that happen to real projects: torch's own loader gets stricter (the
``weights_only=True`` default of torch 2.6), the model's class gains an attribute, and the class
moves to another module. The file sizes, the article's second reason, are shown as well.
"""
# sphinx_gallery_tips_claims = ["S2-3"]
# sphinx_gallery_tips_tags = ["checkpoint", "module-design"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "1.13"
# sphinx_gallery_tips_takeaway = "A pickled model fails under weights_only=True, after its class moves or gains an attribute; a state_dict loads. File sizes barely differ."
# sphinx_gallery_tips_keywords = ["state_dict", "torch.save", "torch.load", "pickle", "weights_only", "load_state_dict", "checkpoint", "ModuleNotFoundError"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/tutorials/beginner/saving_loading_models.html"]
# sphinx_gallery_tips_rules = ["PTT004", "PTT041"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). This tip
# decides from facts: what each load did (loaded, or the exception it raised). A verdict is
# the first case of the rule whose conditions the facts meet.
from tipsite.tipkit import decide, plot_series, report


# %%
# Setup
# -----
# The model class lives in its own module, ``mynet.py``, as it would in a project, so that it
# can later change and move. (The folder goes back on ``sys.path`` in every cell that imports
# from it: some runners, this site's build among them, reset ``sys.path`` between cells.)
import importlib
import os
import pickletools
import sys
import tempfile
import textwrap
import warnings
import zipfile

import torch

torch.manual_seed(0)
device = torch.device("cpu")  # pickling behaves the same for every device
print(f"torch {torch.__version__}")

tmp = tempfile.mkdtemp()
SOURCE = """import torch


class TinyNet(torch.nn.Module):
    def __init__(self, width=64):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 10))
{extra_init}
    def forward(self, x):
        return {forward}
"""


def write_module(name, extra_init="", forward="self.body(x)"):
    with open(os.path.join(tmp, f"{name}.py"), "w", encoding="utf-8") as fh:
        fh.write(SOURCE.format(extra_init=extra_init, forward=forward))
    sys.modules.pop(name, None)
    importlib.invalidate_caches()


def fresh_import(name):
    if tmp not in sys.path:
        sys.path.insert(0, tmp)
    sys.modules.pop(name, None)
    return importlib.import_module(name)


write_module("mynet")
mynet = fresh_import("mynet")
model = mynet.TinyNet()
x = torch.randn(4, 64)  # [batch, features]
expected = model(x)  # [4, 10]

# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
whole_path = os.path.join(tmp, "whole_model.pt")
sd_path = os.path.join(tmp, "state_dict.pt")
torch.save(model, whole_path)  # anti-pattern: pickles the object graph
torch.save(model.state_dict(), sd_path)  # recommended: names -> tensors


def pickled_globals(path):
    """Every class or function a torch.save file refers to by module path and name."""
    with zipfile.ZipFile(path) as z:
        data = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    found, strings = set(), []
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "GLOBAL":
            found.add(arg.replace(" ", "."))
        elif op.name == "STACK_GLOBAL":
            found.add(f"{strings[-2]}.{strings[-1]}")
    return sorted(found)


private = sorted(k for k in vars(model) if k.startswith("_"))
for name, path in (("torch.save(model)", whole_path),
                   ("torch.save(state_dict)", sd_path)):
    refs = pickled_globals(path)
    print(f"{name} names {len(refs)} globals:")
    for ref in refs:
        print("     ", ref)
    if path == whole_path:
        print(f"  and stores each module's {len(private)} private attributes as torch "
              f"{torch.__version__} lays them out,\n  e.g. {', '.join(private[:3])}")


# %%
# Check: the state_dict loads into any class with the same parameter names
# -------------------------------------------------------------------------
# Only parameter names and shapes must match: the class may be renamed, moved or rewritten.
class RenamedNet(torch.nn.Module):  # a refactor moved and renamed the class
    def __init__(self, width=64):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                                        torch.nn.Linear(width, 10))

    def forward(self, x):
        return self.body(x)


fresh = RenamedNet()
fresh.load_state_dict(torch.load(sd_path, weights_only=True))
torch.testing.assert_close(fresh(x), expected, rtol=0, atol=0)
print("state_dict -> RenamedNet (weights_only=True): outputs identical")

# the whole model loads back while nothing changed and the loader may run pickle code
loaded = torch.load(whole_path, weights_only=False)
torch.testing.assert_close(loaded(x), expected, rtol=0, atol=0)
print("whole model, same code, weights_only=False: outputs identical")

# %%
# Situation 1: a stricter loader (``weights_only=True``, the default since torch 2.6)
# ------------------------------------------------------------------------------------
# ``weights_only=True`` unpickles tensors, containers and primitives only, and refuses to
# import arbitrary classes such as ``mynet.TinyNet``. Since torch 2.6 it is what a bare
# ``torch.load(path)`` does; 2.4 and 2.5 load with a FutureWarning, older ones silently.


def try_load(label, fn):
    """Run ``fn``; print and return 'loads' or the name of the exception it raised."""
    try:
        fn()
    except Exception as err:  # whatever loading raises is the answer
        lines = str(err).splitlines()
        line = next((ln for ln in lines if "Unsupported global" in ln), lines[0])
        first = line.strip().split(". ")[0]
        print(textwrap.fill(f"{label}: {type(err).__name__}: {first}.", 88,
                            subsequent_indent="    "))
        return type(err).__name__
    print(f"{label}: loads")
    return "loads"


facts = {}
for label, fn in (
        ("whole model, weights_only=True",
         lambda: torch.load(whole_path, weights_only=True)),
        ("state_dict, weights_only=True",
         lambda: fresh.load_state_dict(torch.load(sd_path, weights_only=True)))):
    facts[label] = try_load(label, fn)

# torch 2.4 and 2.5 warn of the coming change: caught and shown here
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try_load(f"whole model, bare torch.load, torch {torch.__version__}",
             lambda: torch.load(whole_path))
for w in caught:
    print(f"    {w.category.__name__}: {str(w.message).splitlines()[0][:72]}...")

# %%
# Situation 2: the class gains an attribute
# -----------------------------------------
# A later version of ``mynet.py`` scales the output by a new attribute set in ``__init__``.
# Unpickling does not call ``__init__``: the old object gets the new ``forward`` but not the
# new attribute, so it loads and then fails when called. The state_dict goes into a freshly
# built model, which has the attribute.
write_module("mynet", extra_init="        self.scale = 1.0\n",
             forward="self.body(x) * self.scale")
mynet = fresh_import("mynet")
new = mynet.TinyNet()
for label, fn in (
        ("whole model, class edited (load, then call)",
         lambda: torch.load(whole_path, weights_only=False)(x)),
        ("state_dict, class edited",
         lambda: new.load_state_dict(torch.load(sd_path, weights_only=True)))):
    facts[label] = try_load(label, fn)
torch.testing.assert_close(new(x), expected, rtol=0, atol=0)
print("state_dict -> edited TinyNet: outputs identical")

# %%
# Situation 3: the class moves
# ----------------------------
# A refactor renames ``mynet.py`` to ``models_v2.py``. The folder stays on ``sys.path``.
if tmp not in sys.path:
    sys.path.insert(0, tmp)
os.rename(os.path.join(tmp, "mynet.py"), os.path.join(tmp, "models_v2.py"))
sys.modules.pop("mynet", None)
importlib.invalidate_caches()
models_v2 = fresh_import("models_v2")
moved = models_v2.TinyNet()
for label, fn in (
        ("whole model, class moved",
         lambda: torch.load(whole_path, weights_only=False)),
        ("state_dict, class moved",
         lambda: moved.load_state_dict(torch.load(sd_path, weights_only=True)))):
    facts[label] = try_load(label, fn)
torch.testing.assert_close(moved(x), expected, rtol=0, atol=0)
print("state_dict -> models_v2.TinyNet: outputs identical")

# %%
# The article's second reason: file size
# --------------------------------------
# The tensors are the same bytes in both files; the whole-model file adds the pickled module
# objects, a cost per module, not per parameter. Shown at four widths; it does not decide.
# The figure shows the extra bytes against the size of the weights.
models_v2 = fresh_import("models_v2")
sizes, measurements = [], []
for width in (16, 64, 256, 1024):
    m = models_v2.TinyNet(width)
    weights = sum(p.numel() * p.element_size() for p in m.parameters())
    torch.save(m, whole_path)
    torch.save(m.state_dict(), sd_path)
    whole, sd = os.path.getsize(whole_path), os.path.getsize(sd_path)
    sizes.append((width, weights, whole, sd))
    measurements += [
        {"variant": f"torch.save(model), width {width}", "metric": "file size",
         "value": whole / 1024, "unit": "KiB", "device": device.type},
        {"variant": f"torch.save(state_dict), width {width}", "metric": "file size",
         "value": sd / 1024, "unit": "KiB", "device": device.type}]
print("width  weights (KiB)  model file (KiB)  state_dict file (KiB)  extra")
for width, weights, whole, sd in sizes:
    print(f"{width:5d}  {weights / 1024:13.1f}  {whole / 1024:16.1f}  {sd / 1024:21.1f}"
          f"  {(whole - sd) / 1024:.1f} KiB ({whole / sd - 1:.1%})")
kib = [weights / 1024 for _, weights, _, _ in sizes]
fig = plot_series(
    {"state_dict file": (kib, [sd / 1024 for _, _, _, sd in sizes]),
     "torch.save(model) file minus state_dict file":
         (kib, [(whole - sd) / 1024 for _, _, whole, sd in sizes])},
    xlabel="model weights (KiB)", ylabel="bytes on disk (KiB)", device=device,
    title="Extra file size of a pickled model (Linear-ReLU-Linear)", logx=True)
fig.axes[0].set_yscale("log")
sys.modules.pop("models_v2", None)
if tmp in sys.path:
    sys.path.remove(tmp)  # leave the interpreter as we found it

# %%
# Verdict
# -------
# The claim's main reason decides: the whole-model file fails where the state_dict loads.
RULE = ("holds if the state_dict loads in all three situations (weights_only=True, an "
        "edited class, a moved class) and the pickled model fails in at least the last "
        "two; wrong if the pickled model loads and runs in all three; depends "
        "otherwise")
OK = "loads"
cases = [("holds", {"state_dict, weights_only=True": OK, "state_dict, class edited": OK,
                    "state_dict, class moved": OK,
                    "whole model, class edited (load, then call)": ["AttributeError",
                                                                   "TypeError"],
                    "whole model, class moved": ["ModuleNotFoundError",
                                                 "AttributeError"]}),
         ("wrong", {"whole model, weights_only=True": OK,
                    "whole model, class edited (load, then call)": OK,
                    "whole model, class moved": OK}),
         ("depends", {})]
failures = sum(v != OK for k, v in facts.items() if k.startswith("whole model"))
key = {"name": "situations (of 3) where torch.save(model) fails to load or run",
       "value": failures, "unit": "situations"}
decision = decide(device, cases, facts=facts, key=key)
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": measurements, "skipped": []}

import shutil

shutil.rmtree(tmp, ignore_errors=True)

# %%
# When not to use it
# ------------------
# Saving the module object is legitimate for throwaway files read back by the same code
# version. To ship a model without its Python class, export it (``torch.export``) instead of
# pickling it; to resume training, save a dict with the model's and the optimizer's
# ``state_dict`` (plus plain Python values), which loads under ``weights_only=True``.

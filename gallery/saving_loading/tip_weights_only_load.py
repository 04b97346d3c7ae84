"""
``torch.load(weights_only=True)``: a checkpoint must not run code
=================================================================

The seed articles load checkpoints without saying what ``torch.load`` may execute. PyTorch's
serialization notes ("``torch.load`` with ``weights_only=True``") say:

    "Starting in version 2.6, ``torch.load`` will use ``weights_only=True`` if the
    ``pickle_module`` argument is not passed."

    "``weights_only=True`` restricts the unpickler used in ``torch.load`` to only executing
    functions/building classes required for ``state_dicts`` of plain ``torch.Tensors`` as well
    as some other primitive types."

and ``torch.load``'s docstring warns: "**Never load data from an untrusted source.**" A pickle
can name any importable function and have it called during loading. This tip builds such a
file with a harmless payload (it sets an environment variable), loads it both ways, and shows
how to allow your own classes with ``torch.serialization.safe_globals``.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["checkpoint"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "1.13"
# sphinx_gallery_tips_takeaway = "weights_only=True (the default since 2.6) refuses pickles that would run code; allowlist your own classes with safe_globals."
# sphinx_gallery_tips_statement = "weights_only=True restricts the unpickler used in torch.load to only executing functions/building classes required for state_dicts of plain torch.Tensors as well as some other primitive types."
# sphinx_gallery_tips_keywords = ["torch.load", "weights_only", "pickle", "UnpicklingError", "add_safe_globals", "safe_globals", "security"]
# sphinx_gallery_tips_errors = ["_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so you have two options, do those steps only if you trust the source of the checkpoint.", "WeightsUnpickler error: Unsupported global: GLOBAL __main__.TrainConfig was not an allowed global by default. Please use `torch.serialization.add_safe_globals([__main__.TrainConfig])` or the `torch.serialization.safe_globals([__main__.TrainConfig])` context manager to allowlist this global if you trust this class/function."]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/notes/serialization.html#weights-only"]
# sphinx_gallery_tips_rules = ["PTT001", "PTT042"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). This tip
# decides from facts: what each load did (ran the payload or not, loaded or refused). A
# verdict is the first case of the rule whose conditions the facts meet.
from tipsite.tipkit import decide, report


# %%
# Setup
# -----
# Loading is the same on every device, so this tip stays on the CPU.
import dataclasses
import inspect
import os
import pickle
import re
import shutil
import tempfile
import textwrap
import warnings

import torch

torch.manual_seed(0)
device = torch.device("cpu")
print(f"torch {torch.__version__}")
workdir = tempfile.mkdtemp()
FLAG = "TIP_WEIGHTS_ONLY_PAYLOAD_RAN"
os.environ.pop(FLAG, None)


def record_call(message):
    """The 'attacker's' function: harmless here, but it could be ``os.system``."""
    os.environ[FLAG] = message
    return {"looks": "like a state_dict"}


class Payload:
    # pickle calls record_call("...") while loading: code execution at load time.
    def __reduce__(self):
        return (record_call, ("code ran inside torch.load",))


evil_path = os.path.join(workdir, "evil.pt")
torch.save({"weight": torch.ones(2), "extra": Payload()}, evil_path)

# %%
# The anti-pattern: ``weights_only=False``
# ----------------------------------------
loaded = torch.load(evil_path, weights_only=False)
ran_unsafe = os.environ.pop(FLAG, None)
print("weights_only=False -> payload ran:", ran_unsafe)
print("                      and the file's 'extra' became:", loaded["extra"])

# %%
# The recommended pattern: ``weights_only=True``
# ----------------------------------------------
# The restricted unpickler refuses the unknown global before calling anything.
try:
    torch.load(evil_path, weights_only=True)
    refused = None
except pickle.UnpicklingError as err:
    refused = re.sub(r"\x1b\[[0-9;]*m", "", str(err))  # drop terminal colour codes
ran_safe = os.environ.pop(FLAG, None)
print("weights_only=True  -> refused:", refused is not None, "| payload ran:", ran_safe)
lines = (refused or "").splitlines()
reason = next((ln for ln in lines if "Unsupported global" in ln), "")
print(textwrap.fill(reason.strip().split(". ")[0] + ".", 88, initial_indent="    ",
                    subsequent_indent="    "))

# %%
# What does a bare ``torch.load(path)`` do in this torch version?
# ---------------------------------------------------------------
# The signature only says ``weights_only=None``; what ``None`` means changed in 2.6. Loading the
# same file without the argument shows the behaviour of the installed version.
signature = inspect.signature(torch.load)
print("signature default:", signature.parameters["weights_only"].default)
with warnings.catch_warnings(record=True) as caught:  # torch 2.4-2.5 warn of the change
    warnings.simplefilter("always")
    try:
        torch.load(evil_path)
        default_refuses = False
    except pickle.UnpicklingError:
        default_refuses = True
os.environ.pop(FLAG, None)
future = [str(w.message).splitlines()[0][:80] for w in caught
          if issubclass(w.category, FutureWarning)]
print(f"bare torch.load(path) in torch {torch.__version__}:",
      "refuses the payload" if default_refuses else "runs the payload")
if future:
    print("  with a FutureWarning:", future[0])

# %%
# Check: a real state_dict, and your own classes
# ----------------------------------------------
# Plain state_dicts load unchanged. A checkpoint that also stores your own class is refused
# until you allowlist that class: ``torch.serialization.safe_globals`` (torch 2.5+) does it
# for one block of code, ``add_safe_globals`` (2.4+) for the rest of the process.
model = torch.nn.Linear(4, 2)


@dataclasses.dataclass
class TrainConfig:
    lr: float
    epochs: int


sd_path = os.path.join(workdir, "sd.pt")
torch.save(model.state_dict(), sd_path)
try:
    sd = torch.load(sd_path, weights_only=True)
    sd_load = "loads"
except pickle.UnpicklingError:
    sd_load = "UnpicklingError"
else:
    for k, v in model.state_dict().items():
        torch.testing.assert_close(sd[k], v, rtol=0, atol=0)
print("plain state_dict, weights_only=True:", sd_load)

ckpt_path = os.path.join(workdir, "ckpt.pt")
torch.save({"model": model.state_dict(), "config": TrainConfig(1e-3, 10)}, ckpt_path)
try:
    torch.load(ckpt_path, weights_only=True)
    config_load = "loads"
except pickle.UnpicklingError as err:
    config_load = "UnpicklingError"
    line = next((ln for ln in str(err).splitlines() if "Unsupported global" in ln), "")
    message = f"checkpoint with TrainConfig refused: {line.strip().split('. ')[0]}."
    print(textwrap.fill(message, 88, subsequent_indent="    "))

skipped, allowlisted = [], "not available"
if hasattr(torch.serialization, "safe_globals"):
    with torch.serialization.safe_globals([TrainConfig]):
        config = torch.load(ckpt_path, weights_only=True)["config"]
    allowlisted = "loads"
    print("inside safe_globals([TrainConfig]):", config)
else:
    skipped.append("safe_globals demo: needs torch >= 2.5")
    print("Skipped: safe_globals needs torch >= 2.5")
shutil.rmtree(workdir)

# %%
# Verdict
# -------
RULE = ("holds if weights_only=False runs the payload, weights_only=True refuses it "
        "without running it, and a plain state_dict still loads with "
        "weights_only=True; wrong if weights_only=True runs the payload; depends "
        "otherwise")
facts = {"weights_only=False runs the payload": ran_unsafe is not None,
         "weights_only=True refuses the file": refused is not None,
         "weights_only=True runs the payload": ran_safe is not None,
         "plain state_dict, weights_only=True": sd_load,
         "bare torch.load refuses the payload": default_refuses,
         "own class, weights_only=True": config_load,
         "own class inside safe_globals": allowlisted}
cases = [("holds", {"weights_only=False runs the payload": True,
                    "weights_only=True refuses the file": True,
                    "weights_only=True runs the payload": False,
                    "plain state_dict, weights_only=True": "loads"}),
         ("wrong", {"weights_only=True runs the payload": True}),
         ("depends", {})]
decision = decide(device, cases, facts=facts)
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": skipped}

# %%
# When not to use it
# ------------------
# Old checkpoints that pickled a whole ``nn.Module`` or other Python objects need
# ``weights_only=False``: do that only for files you produced or trust. Better, re-save them as
# ``state_dict`` plus plain Python values, or allowlist the few classes they need.

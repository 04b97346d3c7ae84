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
how to allow your own classes with ``torch.serialization.add_safe_globals``.
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["checkpoint"]
# sphinx_gallery_tips_devices = ["cpu"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "1.13"
# sphinx_gallery_tips_takeaway = "weights_only=True (the default since 2.6) refuses pickles that would run code; allowlist your own classes with add_safe_globals."
# sphinx_gallery_tips_keywords = ["torch.load", "weights_only", "pickle", "UnpicklingError", "add_safe_globals", "safe_globals", "security"]
# sphinx_gallery_tips_docs = ["https://docs.pytorch.org/docs/stable/notes/serialization.html#weights-only"]

# %%
# Setup
# -----
import dataclasses
import inspect
import os
import pickle
import re
import shutil
import tempfile
import warnings

import torch

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, torch {torch.__version__}")
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
print("weights_only=False -> payload ran:", ran_unsafe, "| got:", loaded["extra"])

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
assert refused is not None and ran_safe is None, "weights_only=True must refuse the payload"
print("weights_only=True  -> refused, payload ran:", ran_safe)
print("error (first lines):")
print("\n".join("   " + line for line in refused.splitlines()[:4]))

# %%
# What does a bare ``torch.load(path)`` do in this torch version?
# ---------------------------------------------------------------
# The signature only says ``weights_only=None``; what ``None`` means changed in 2.6. Loading the
# same file without the argument shows the behaviour of the installed version.
print("signature default:", inspect.signature(torch.load).parameters["weights_only"].default)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        torch.load(evil_path)
        default_refuses = False
    except pickle.UnpicklingError:
        default_refuses = True
os.environ.pop(FLAG, None)
future = [str(w.message).splitlines()[0][:140] for w in caught if issubclass(w.category, FutureWarning)]
print(f"bare torch.load(path) in torch {torch.__version__}:",
      "refuses the payload (weights_only=True by default)" if default_refuses
      else "runs the payload (weights_only=False by default)")
if future:
    print("  with a FutureWarning:", future[0])

# %%
# Check: a real state_dict, and your own classes
# ----------------------------------------------
# Plain state_dicts load unchanged. A checkpoint that also stores your own class is refused until
# you allowlist that class (``add_safe_globals``, torch >= 2.4).
model = torch.nn.Linear(4, 2)
ckpt_path = os.path.join(workdir, "ckpt.pt")


@dataclasses.dataclass
class TrainConfig:
    lr: float
    epochs: int


torch.save({"model": model.state_dict(), "config": TrainConfig(1e-3, 10)}, ckpt_path)
sd_path = os.path.join(workdir, "sd.pt")
torch.save(model.state_dict(), sd_path)
sd = torch.load(sd_path, weights_only=True)
for k, v in model.state_dict().items():
    torch.testing.assert_close(sd[k], v)
print("plain state_dict loads with weights_only=True")

try:
    torch.load(ckpt_path, weights_only=True)
    config_refused = False
except pickle.UnpicklingError as err:
    config_refused = True
    print("checkpoint with TrainConfig refused:",
          next((ln.strip() for ln in str(err).splitlines() if "Unsupported global" in ln), "")[:160])

allowlisted = None
if hasattr(torch.serialization, "add_safe_globals"):
    torch.serialization.add_safe_globals([TrainConfig])
    allowlisted = torch.load(ckpt_path, weights_only=True)["config"]
    print("after add_safe_globals([TrainConfig]):", allowlisted)
else:
    print("Skipped: add_safe_globals needs torch >= 2.4")
shutil.rmtree(workdir)

# %%
# Verdict
# -------
RULE = ("holds if weights_only=False runs the payload, weights_only=True refuses it without running "
        "it, and a plain state_dict still loads with weights_only=True")
ok = bool(ran_unsafe) and refused is not None and ran_safe is None
verdict = "holds" if ok else "wrong"
print(f"Verdict: {verdict}. weights_only=False executed the payload; weights_only=True refused it"
      f" ({'the default here' if default_refuses else 'not yet the default here'}).")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": None,
    "measurements": [],
    "skipped": [] if allowlisted is not None else ["add_safe_globals demo: needs torch >= 2.4"],
}

# %%
# When not to use it
# ------------------
# Old checkpoints that pickled a whole ``nn.Module`` or optimizer-adjacent Python objects need
# ``weights_only=False``: do that only for files you produced or trust. Better, re-save them as
# ``state_dict`` plus plain Python values, or allowlist the few classes they need.

"""Start a tip from the template: ``nox -s new_tip -- TOPIC tip_name`` (``python -m tipsite.newtip``).

Writes ``gallery/TOPIC/tip_name.py`` with the canonical cells in their order, the metadata to fill
in, and the import of the helpers (:mod:`tipsite.tipkit`; the build inlines them into the download,
:mod:`tipsite.tipsource`). The new file is a valid
tip that runs and decides from a placeholder measurement: replace each ``TODO`` with the claim,
the anti-pattern, the fix and the real measurement.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from conf import settings
from tipsite import tipmeta

TEMPLATE = '''"""
{title}
{underline}

TODO: the claim, quoted exactly as conf/claims.toml has it for each claim id you list below
(or, for a claim from PyTorch's documentation, quoted with its source).
"""
# sphinx_gallery_tips_claims = []
# sphinx_gallery_tips_tags = ["training"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "TODO: one line for the index card, agreeing with the figures."
# sphinx_gallery_tips_statement = "TODO: the claim the verdicts judge, in one line"

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
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {{device}}, threads: {{torch.get_num_threads()}}, "
      f"torch {{torch.__version__}}")


# %%
# The anti-pattern and the recommended pattern
# --------------------------------------------
def anti_pattern(x):
    return x.clone().mul(2)  # TODO


def recommended(x):
    return x.mul(2)  # TODO


# %%
# Check: both compute the same thing
# ----------------------------------
x = torch.randn(64, device=device)
torch.testing.assert_close(anti_pattern(x), recommended(x))

# %%
# Measurement
# -----------
sizes = {{"cpu": [2**8, 2**12, 2**16, 2**20],
         "cuda": [2**12, 2**16, 2**20, 2**24]}}[device.type]
speedups = []
for n in sizes:
    x = torch.randn(n, device=device)
    speedups.append(compare_times(f"speed-up at {{n}} elements",
                                  {{"anti-pattern": lambda: anti_pattern(x),
                                   "recommended": lambda: recommended(x)}},
                                  threshold=1.05, device=device, x=n))

# %%
# Where it pays
# -------------
fig = plot_ratios({{"recommended vs anti-pattern": speedups}},
                  xlabel="tensor size (elements)", title="TODO: what was timed")

# %%
# Verdict
# -------
RULE = ("holds if the recommended pattern is >5% faster at every size; wrong if at no "
        "size; depends otherwise")
decision = decide(device, [("holds", {{"speed-up": "all above"}}),
                           ("wrong", {{"speed-up": "none above"}}),
                           ("depends", {{}})],
                  groups={{"speed-up": speedups}}, key=speedups[-1])
report(decision, RULE)
RESULT = {{"rule": RULE, "verdicts": {{device.type: decision}}, "measurements": [],
          "skipped": []}}

# %%
# When not to use it
# ------------------
# TODO: where the recommended pattern does not pay, or hurts.
'''


def new_tip(topic: str, name: str, gallery: Path = settings.GALLERY_DIR) -> Path:
    if topic not in tipmeta.vocab()["topics"]:
        raise ValueError(f"unknown topic {topic!r} (known: {', '.join(tipmeta.vocab()['topics'])})")
    if not re.fullmatch(r"tip_[a-z0-9_]+", name):
        raise ValueError(f"a tip is named tip_<what_it_shows> in lower case, got {name!r}")
    path = gallery / topic / f"{name}.py"
    if path.exists() or any(p.stem == name for p in tipmeta.tip_files(gallery)):
        raise ValueError(f"{name} already exists")
    title = name.removeprefix("tip_").replace("_", " ").capitalize()
    text = TEMPLATE.format(title=title, underline="=" * len(title))
    path.write_text(text, encoding="utf-8")
    tipmeta.read_tip(path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tipsite.newtip", description=__doc__.split("\n\n")[0])
    parser.add_argument("topic")
    parser.add_argument("name")
    args = parser.parse_args(argv)
    try:
        path = new_tip(args.topic, args.name)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}: fill in each TODO, then `python -m tipsite.tipcheck {path}`; add its "
          "quick-reference entry to docs/reference/quick.rst")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""
Reusable sub-modules instead of one flat class
==============================================

The article advises writing a repeated piece of a network once, as its own ``nn.Module``, and
composing it, rather than declaring every layer in one big class (claim S0-1):

    "You need not define the same scaled_dot_products again and again. Rather, creating a
    `SimpleAttention()` block once and reusing it when needed is a better way to code."

This tip builds the same three-block attention stack twice: once flat (every projection
declared by hand, the forward pass pasted three times) and once from a ``SimpleAttention``
block. Readability cannot be measured; what can go wrong with the refactoring can: the
composed model could compute something else, hold other parameters, or run slower (each block
is one more ``nn.Module`` call). This tip checks all three, the speed across model sizes.
"""
# sphinx_gallery_tips_claims = ["S0-1"]
# sphinx_gallery_tips_tags = ["module-design"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "1.8"
# sphinx_gallery_tips_takeaway = "A reusable block computes exactly what a flat class does, with the same parameters; its extra module calls cost little speed, and only on tiny ops."
# sphinx_gallery_tips_keywords = ["nn.Module", "submodule", "ModuleList", "attention block", "named_parameters", "refactoring"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/docs/stable/generated/torch.nn.Module.html"]
# sphinx_gallery_tips_related = ["tip_module_list"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). Facts are
# what the tip observed on this device (outputs and parameter counts equal or not). The two
# models are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, flat time / composed time. The interval is a ~95% confidence interval for the median
# ratio; rounds are added while it straddles the rule's threshold. A verdict is the first case
# of the rule whose conditions the measurements meet.
from tipsite.tipkit import compare_times, decide, plot_ratios, report


# %%
# Setup
# -----
# One CPU thread: the cost in question is Python overhead per module call, and one thread keeps
# small ops from stalling on a busy machine.
import math

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")
B = 4  # batch


# %%
# The anti-pattern: one flat class
# --------------------------------
# Every projection of every block is declared by hand and the attention arithmetic is pasted
# once per block. Depth is baked into the code.
class FlatAttentionStack(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.q1, self.k1, self.v1, self.o1 = (nn.Linear(d, d) for _ in range(4))
        self.q2, self.k2, self.v2, self.o2 = (nn.Linear(d, d) for _ in range(4))
        self.q3, self.k3, self.v3, self.o3 = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):  # x: [B, T, D]
        s = math.sqrt(x.shape[-1])
        # attention weights [B, T, T], then the residual update [B, T, D], per block
        a = torch.softmax(self.q1(x) @ self.k1(x).transpose(-2, -1) / s, dim=-1)
        x = x + self.o1(a @ self.v1(x))
        a = torch.softmax(self.q2(x) @ self.k2(x).transpose(-2, -1) / s, dim=-1)
        x = x + self.o2(a @ self.v2(x))
        a = torch.softmax(self.q3(x) @ self.k3(x).transpose(-2, -1) / s, dim=-1)
        x = x + self.o3(a @ self.v3(x))
        return x


# %%
# The recommended pattern: a ``SimpleAttention`` block, composed
# --------------------------------------------------------------
class SimpleAttention(nn.Module):
    """One residual scaled-dot-product self-attention block."""

    def __init__(self, d: int):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):  # x: [B, T, D]
        scale = math.sqrt(x.shape[-1])
        scores = self.q(x) @ self.k(x).transpose(-2, -1) / scale  # [B, T, T]
        return x + self.o(torch.softmax(scores, dim=-1) @ self.v(x))  # [B, T, D]


class AttentionStack(nn.Module):
    def __init__(self, d: int, depth: int = 3, block=SimpleAttention):
        super().__init__()
        self.blocks = nn.ModuleList(block(d) for _ in range(depth))

    def forward(self, x):  # x: [B, T, D] -> [B, T, D]
        for blk in self.blocks:
            x = blk(x)
        return x


# %%
# Check: the same function, with the same weights
# -----------------------------------------------
# Copy the composed model's weights into the flat one (``blocks.1.q.weight`` ->
# ``q2.weight``), so both start from one initialisation, and compare outputs bit for bit. The
# renaming is also what refactoring costs: a flat checkpoint does not load into the composed
# model without such a map.
def flat_copy(composed, d):
    flat = FlatAttentionStack(d).to(device)
    renamed = {}
    for name, tensor in composed.state_dict().items():
        _, idx, proj, kind = name.split(".")  # "blocks", "1", "q", "weight"
        renamed[f"{proj}{int(idx) + 1}.{kind}"] = tensor
    flat.load_state_dict(renamed)  # strict: every key must match, none left over
    return flat


D, T = 32, 16
composed = AttentionStack(D).to(device)
flat = flat_copy(composed, D)
x = torch.randn(B, T, D, device=device)  # [B, T, D]
y_flat, y_composed = flat(x), composed(x)  # [B, T, D] each
n_flat = sum(p.numel() for p in flat.parameters())
n_composed = sum(p.numel() for p in composed.parameters())
facts = {"same outputs with the same weights": torch.equal(y_flat, y_composed),
         "same number of parameters": n_flat == n_composed}
print(f"outputs identical: {facts['same outputs with the same weights']}, "
      f"parameters: flat {n_flat}, composed {n_composed}")
try:
    composed.load_state_dict(flat.state_dict())
except RuntimeError as err:
    print("a flat checkpoint loaded into the composed model:", str(err).splitlines()[0])

# %%
# Measurement: what the extra module calls cost
# ---------------------------------------------
# Forward passes (no gradients) from tiny models, where Python overhead per call is most of the
# time, to ones where the arithmetic is. A GPU needs far larger ops before the arithmetic
# dominates.
sizes = {"cpu": [(8, 4), (32, 16), (96, 32), (256, 64)],
         "cuda": [(32, 16), (128, 64), (256, 128), (512, 256)]}[device.type]  # (D, T)
speed = []
for D, T in sizes:
    composed = AttentionStack(D).to(device)
    flat = flat_copy(composed, D)
    x = torch.randn(B, T, D, device=device)  # [B, T, D]

    def run_flat():
        with torch.no_grad():
            return flat(x)

    def run_composed():
        with torch.no_grad():
            return composed(x)

    speed.append(compare_times(
        f"flat / composed at width {D}",
        {"flat class": run_flat, "composed blocks": run_composed},
        threshold=0.8, device=device, x=D, budget_s=1.5))

# %%
# Where it costs
# --------------
# Below 1.0 the composed model is slower; the dashed line is the rule's limit for a cost.
fig = plot_ratios({"flat / composed": speed},
                  xlabel="model width D (sequence length grows with it)",
                  title=f"3-block attention stack, batch {B}, forward",
                  ylabel="flat time / composed time")

# %%
# Verdict
# -------
# Composing is the better way to code if nothing that matters is lost by it: the same
# function, the same parameters, and no speed cost beyond 20% (an interval entirely below
# 0.8) at any size. A block's own ``nn.Module`` call is Python overhead of the same kind as
# each ``Linear`` call, so a smaller cost on the tiniest models is expected; the sweep shows
# whether it grows past that. The cost is the host's, so on a GPU every timing counts,
# host-bound ones too (``about="host"``): where the GPU work hides it, it costs nothing.
RULE = ("holds if the composed model gives bit-identical outputs with the same "
        "weights, has the same parameter count, and is at no size >20% slower "
        "(interval below 0.8); wrong if outputs or counts differ; depends otherwise "
        "(on the size). The cost is the host's (Python calls): on a GPU a host-bound "
        "timing counts")
decision = decide(device,
                  [("wrong", {"same outputs with the same weights": False}),
                   ("wrong", {"same number of parameters": False}),
                   ("holds", {"speed": "none below"}),
                   ("depends", {})],
                  groups={"speed": speed}, facts=facts, key=speed[0], about="host")
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": [], "skipped": []}

# %%
# When not to use it
# ------------------
# A block that appears once and never varies gains nothing from its own class; splitting it
# only moves code around. Renaming parameters (``q2`` -> ``blocks.1.q``) breaks old checkpoints,
# as shown above: refactor before you have checkpoints to keep, or map the keys as
# ``flat_copy`` does.

"""
``H[torch.arange(B), idx]`` versus ``H[:, idx]``
================================================

The article looks at a batched tensor ``H`` of shape ``[B, N, F]`` indexed as
``H[torch.arange(H.shape[0]), idx]`` and says (claim S3-2):

    "This can easily be replaced with a colon (`:`) ."

i.e. write ``H[:, idx]``, or "even better" ``H[:, idx, :]``. The article does not say what
``idx`` is. Whether the two expressions agree depends on exactly that: advanced indices that
sit next to each other are broadcast together and *paired*, while a colon pairs with nothing.
This tip tries every kind of ``idx`` a reader may have: a Python int, a 0-d tensor, one index
per batch element (shape ``[B]``) and a list of rows shared by the batch (shape ``[K]``), and
compares both colon spellings with the arange form for each.
"""
# sphinx_gallery_tips_claims = ["S3-2"]
# sphinx_gallery_tips_tags = ["indexing"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "2.0"
# sphinx_gallery_tips_takeaway = "For a scalar idx, H[:, idx] equals the arange form (and is a view); for one index per batch element it returns [B, B, F]: use gather."
# sphinx_gallery_tips_keywords = ["advanced indexing", "arange", "gather", "take_along_dim", "batched indexing", "fancy indexing", "colon"]
# sphinx_gallery_tips_docs = ["https://numpy.org/doc/stable/user/basics.indexing.html#combining-advanced-and-basic-indexing", "https://pytorch.org/docs/stable/generated/torch.take_along_dim.html"]
# sphinx_gallery_tips_rules = ["PTT010"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). This tip
# times nothing: its verdict rests on *facts*, what it observed on this device (an error
# raised, shapes and values equal or not). A verdict is the first case of the rule whose
# conditions the facts meet.
from tipsite.tipkit import decide, report


# %%
# Setup
# -----
# A small batch where every entry is distinct, so any mix-up shows in the values.
import torch

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, torch {torch.__version__}")

B, N, F = 4, 6, 3
H = torch.arange(B * N * F, dtype=torch.float32, device=device).reshape(B, N, F)

# H: [B, N, F]. The kinds of ``idx`` the article's line can meet, with different
# meanings: a scalar picks one row for every batch element, ``[B]`` one row per batch
# element, ``[K]`` K rows for all of them.
kinds = {
    "int idx": 3,
    "0-d tensor idx": torch.tensor(3, device=device),
    "idx per batch [B]": torch.tensor([5, 0, 2, 3], device=device),  # [B]
    "shared idx [K=2]": torch.tensor([1, 4], device=device),  # [K]
}


# %%
# The article's expression and its proposed replacements
# ------------------------------------------------------
def article_form(idx):  # the "Don't" line
    return H[torch.arange(H.shape[0], device=device), idx]


def colon_form(idx):  # the "Do" line
    return H[:, idx]


def colon_full_form(idx):  # the "Even better" line
    return H[:, idx, :]


# %%
# Check: does each replacement give the same tensor?
# --------------------------------------------------
# "same" means equal shape and equal values. A shape or value difference, or the arange form
# raising, is a difference the reader would have to know about.
def shape_of(form, idx):
    try:
        return str(tuple(form(idx).shape))
    except IndexError:
        return "IndexError"


def compare(idx, replacement):
    try:
        want = article_form(idx)
    except IndexError:
        return "arange form raises IndexError"
    got = replacement(idx)
    if got.shape != want.shape:
        return "different shape"
    return "same" if torch.equal(got, want) else "different values"


facts = {}
print(f"{'shapes for':18s} {'arange form':12s} {'H[:, idx]':12s} {'H[:, idx, :]':12s}")
for kind, idx in kinds.items():
    facts[f"{kind}: H[:, idx]"] = compare(idx, colon_form)
    facts[f"{kind}: H[:, idx, :]"] = compare(idx, colon_full_form)
    forms = (article_form, colon_form, colon_full_form)
    shapes = [shape_of(form, idx) for form in forms]
    print(f"{kind:18s} " + " ".join(f"{shape:12s}" for shape in shapes))
try:
    article_form(kinds["shared idx [K=2]"])
except IndexError as err:
    print("IndexError:", str(err)[:60], "...")

# %%
# A scalar ``idx``: a view instead of a copy
# ------------------------------------------
# For a scalar the colon form is basic indexing and returns a view of ``H``; the arange form
# is advanced indexing and copies the rows.
storage = H.untyped_storage().data_ptr()
scalar_view = colon_form(3).untyped_storage().data_ptr() == storage
arange_copy = article_form(3).untyped_storage().data_ptr() != storage
print("int idx: H[:, idx] is a view of H:", scalar_view,
      "| the arange form makes a copy:", arange_copy)

# %%
# One index per batch element: what the arange form computes, and its short forms
# -------------------------------------------------------------------------------
# The arange form pairs ``arange[b]`` with ``idx[b]``: row ``idx[b]`` of batch ``b``, shape
# ``[B, F]``. ``H[:, idx]`` takes every listed row from every batch, ``[B, B, F]``; the wanted
# rows are its diagonal. ``torch.gather`` and ``torch.take_along_dim`` express the pairing
# without building the arange by hand.
idx = kinds["idx per batch [B]"]
per_batch = article_form(idx)  # [B, F]
colon = colon_form(idx)  # [B, B, F]
eye = torch.arange(B, device=device)
torch.testing.assert_close(colon[eye, eye], per_batch, rtol=0, atol=0)
via_gather = torch.gather(H, 1, idx.view(B, 1, 1).expand(B, 1, F)).squeeze(1)  # [B, F]
via_take = torch.take_along_dim(H, idx.view(B, 1, 1), dim=1).squeeze(1)  # [B, F]
torch.testing.assert_close(via_gather, per_batch, rtol=0, atol=0)
torch.testing.assert_close(via_take, per_batch, rtol=0, atol=0)
print(f"rows returned: arange form {per_batch.shape[0]}, "
      f"H[:, idx] {colon.shape[0] * colon.shape[1]} (the wanted ones on its diagonal)")
print("gather and take_along_dim equal the arange form:",
      torch.equal(via_gather, per_batch) and torch.equal(via_take, per_batch))

# %%
# Verdict
# -------
# The claim is that the colon replaces the arange form. It holds if both colon spellings give
# the same tensor for every kind of ``idx``, is wrong if for none, and depends on ``idx``
# otherwise.
RULE = ("holds if H[:, idx] and H[:, idx, :] equal H[torch.arange(B), idx] (shape "
        "and values) for every kind of idx tried; wrong if for none; depends (on what "
        "idx is) otherwise")
differs = ["different shape", "different values", "arange form raises IndexError"]
same_kinds = [k for k in kinds
              if facts[f"{k}: H[:, idx]"] == facts[f"{k}: H[:, idx, :]"] == "same"]
decision = decide(device, [("holds", {name: "same" for name in facts}),
                           ("wrong", {name: differs for name in facts}),
                           ("depends", {})],
                  facts=facts,
                  key={"name": "kinds of idx where both colon forms equal the "
                               "arange form",
                       "value": len(same_kinds), "unit": f"of {len(kinds)}"})
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision},
          "measurements": [], "skipped": []}

# %%
# When not to use it
# ------------------
# Replace ``H[torch.arange(B), idx]`` by ``H[:, idx]`` only when ``idx`` is a scalar: the same
# rows, and a view instead of a copy. When each batch element has its own index (the logit of
# each sample's target class, the hidden state at each sequence's last position) keep the
# arange form or use ``take_along_dim``/``gather``: ``H[:, idx]`` silently returns ``[B, B, F]``
# when ``len(idx) == B``. For rows shared by the whole batch, ``H[:, idx]`` is the right tool
# and the arange form is not.

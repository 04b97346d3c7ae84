"""
``H[torch.arange(B), idx]`` is not ``H[:, idx]``
================================================

The article looks at indexing a batched tensor ``H`` of shape ``[B, N, F]`` with one index per
batch element, ``H[torch.arange(H.shape[0]), idx]``, and says (claim S3-2):

    "This can easily be replaced with a colon (`:`) ."

i.e. write ``H[:, idx]`` (or ``H[:, idx, :]``) instead. The two expressions are different
operations. Advanced indices that sit next to each other are *paired*: ``arange`` and ``idx``
are zipped, giving row ``idx[b]`` of batch ``b`` -> shape ``[B, F]``. A colon is *not* paired
with anything: ``H[:, idx]`` takes every row listed in ``idx`` from every batch -> shape
``[B, len(idx), F]``. This tip runs both, compares them, and shows the correct short forms.
"""
# sphinx_gallery_tips_claims = ["S3-2"]
# sphinx_gallery_tips_tags = ["indexing"]
# sphinx_gallery_tips_devices = ["cpu", "cuda"]
# sphinx_gallery_tips_kind = "behaviour"
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "H[:, idx] gathers every idx row for every batch; one row per batch needs the arange form, gather or take_along_dim."
# sphinx_gallery_tips_keywords = ["advanced indexing", "arange", "gather", "take_along_dim", "batched indexing", "fancy indexing"]
# sphinx_gallery_tips_docs = ["https://numpy.org/doc/stable/user/basics.indexing.html#combining-advanced-and-basic-indexing", "https://pytorch.org/docs/stable/generated/torch.take_along_dim.html"]

# %%
# Setup
# -----
# A small batch where every entry is distinct, so any mix-up shows in the values.
import torch

torch.manual_seed(0)
torch.set_num_threads(min(2, torch.get_num_threads()))
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}")

B, N, F = 4, 6, 3
H = torch.arange(B * N * F, dtype=torch.float32, device=device).reshape(B, N, F)  # [B, N, F]
idx = torch.tensor([5, 0, 2, 3], device=device)  # [B]: the row wanted from each batch element

# %%
# The article's expression and its proposed replacement
# -----------------------------------------------------
per_batch = H[torch.arange(H.shape[0], device=device), idx]  # [B, F]: row idx[b] of batch b
colon = H[:, idx]                                            # [B, B, F]: rows idx[0..B-1] of every batch
colon_full = H[:, idx, :]                                    # the article's other spelling
print("H[torch.arange(B), idx].shape:", tuple(per_batch.shape))
print("H[:, idx].shape:              ", tuple(colon.shape))
print("H[:, idx, :].shape:           ", tuple(colon_full.shape))

# %%
# Check: are they the same thing?
# -------------------------------
# They are not even the same shape. The arange result is the *diagonal* of the colon result:
# ``colon[b, b] == per_batch[b]``; the colon form computes B times more rows, B-1 of them unwanted.
same_shape = per_batch.shape == colon.shape
same_values = same_shape and torch.equal(per_batch, colon)
diagonal = colon[torch.arange(B, device=device), torch.arange(B, device=device)]  # [B, F]
torch.testing.assert_close(diagonal, per_batch, rtol=0, atol=0)
print("same shape:", same_shape, "| same values:", same_values)
print("H[:, idx][b, b] == H[arange, idx][b] for every b:", torch.equal(diagonal, per_batch))
print(f"rows computed: arange form {per_batch.shape[0]}, colon form {colon.shape[0] * colon.shape[1]}")

# %%
# Correct equivalents of the arange form
# --------------------------------------
# ``torch.gather`` and ``torch.take_along_dim`` pick one row per batch element without building
# the arange by hand. Both need the index expanded to the result's rank.
via_gather = torch.gather(H, 1, idx.view(B, 1, 1).expand(B, 1, F)).squeeze(1)  # [B, F]
via_take = torch.take_along_dim(H, idx.view(B, 1, 1), dim=1).squeeze(1)       # [B, F]
torch.testing.assert_close(via_gather, per_batch, rtol=0, atol=0)
torch.testing.assert_close(via_take, per_batch, rtol=0, atol=0)
print("gather == arange form:", torch.equal(via_gather, per_batch),
      "| take_along_dim == arange form:", torch.equal(via_take, per_batch))

# %%
# When ``H[:, idx]`` is the right tool
# ------------------------------------
# When every batch element wants the *same* rows (one index list shared by the batch), the
# colon form is correct and is what the arange form would need a broadcast to express.
shared = torch.tensor([1, 4], device=device)  # [K]: same rows for all batch elements
shared_colon = H[:, shared]                                              # [B, K, F]
shared_arange = H[torch.arange(B, device=device)[:, None], shared[None, :]]  # [B, K, F], explicit broadcast
torch.testing.assert_close(shared_colon, shared_arange, rtol=0, atol=0)
print("shared index: H[:, shared] == H[arange[:, None], shared[None, :]]:",
      torch.equal(shared_colon, shared_arange))

# %%
# Verdict
# -------
# The claim is that one expression can replace the other; it is wrong if, on the same inputs,
# the two differ in shape or values.
RULE = ("wrong if H[:, idx] differs from H[torch.arange(B), idx] in shape or values for an idx "
        "with one entry per batch element; holds if they are equal")
verdict = "holds" if same_values else "wrong"
print(f"Verdict: {verdict}. Shapes {tuple(per_batch.shape)} vs {tuple(colon.shape)}.")
print(f"Rule: {RULE}")

RESULT = {
    "verdict": verdict,
    "rule": RULE,
    "key": {"name": "rows produced, colon / arange form", "value": colon.shape[0] * colon.shape[1] / per_batch.shape[0],
            "unit": "x"},
    "measurements": [
        {"variant": "H[arange(B), idx]", "metric": "rows returned", "value": per_batch.shape[0], "unit": "rows"},
        {"variant": "H[:, idx]", "metric": "rows returned", "value": colon.shape[0] * colon.shape[1], "unit": "rows"},
    ],
    "skipped": [],
}

# %%
# When not to use it
# ------------------
# Keep ``H[torch.arange(B), idx]`` (or ``take_along_dim``) whenever each batch element has its
# own index, e.g. picking the logit of each sample's target class or the hidden state at each
# sequence's last position. Use ``H[:, idx]`` only for an index shared by the whole batch.

"""Sentence embeddings from an encoder: mean pooling over real tokens, L2-normalised.

This is what sentence-transformers does for mean-pooling models (all-MiniLM, ...): the
final hidden states (B, T, d), averaged over the tokens the attention mask marks, then
scaled to unit length so a dot product is the cosine similarity.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.model.build import ZooModel


@torch.no_grad()
def embed(
    model: ZooModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    token_type_ids: torch.Tensor | None = None,
    *,
    normalize: bool = True,
) -> torch.Tensor:
    """One vector per row (B, d): the mean of the final hidden states over real tokens
    (``attention_mask`` 1), unit length unless ``normalize=False``. Any head is skipped."""
    hidden = model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, hidden=True)  # (B, T, d)
    if attention_mask is None:
        pooled = hidden.mean(dim=1)  # (B, d)
    else:
        weights = attention_mask.to(hidden.dtype)[..., None]  # (B, T, 1)
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)
    return F.normalize(pooled, dim=-1) if normalize else pooled

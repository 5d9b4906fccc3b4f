"""Which keys each query may see: causality, sliding windows, padding.

Times are indices along the cache's time axis (the order tokens arrived, pads included);
queries and keys compare by time, so left padding never shifts a window.
"""

from __future__ import annotations

import torch


def visible(
    query_time: torch.Tensor,
    key_time: torch.Tensor,
    window: int | None,
    key_valid: torch.Tensor | None = None,
    causal: bool = True,
) -> torch.Tensor:
    """Boolean mask (B or 1, 1, T, S): True where query t may attend to key s.

    query_time (T,), key_time (S,) or (B, S); negative key times mark empty cache slots.
    key_valid (B, S) marks keys that are real tokens rather than padding. A causal window
    keeps the keys with q - k < window (the query and window - 1 before it, Mistral); a
    bidirectional one those with |q - k| <= window // 2 (ModernBERT's local_attention 128
    sees 64 tokens each side).
    """
    q = query_time[:, None]  # (T, 1)
    k = key_time[..., None, :]  # (S,) -> (1, S) or (B, 1, S)
    mask = k >= 0  # (S,)-like: filled slots
    if causal:
        mask = mask & (k <= q)  # (T, S) or (B, T, S)
    if window is not None:
        mask = mask & ((q - k < window) if causal else ((q - k).abs() <= window // 2))
    mask = mask.expand(*k.shape[:-2], q.shape[0], k.shape[-1])  # (T, S) or (B, T, S)
    if key_valid is not None:
        # a padding query sees only itself: its output is unused, but a fully masked row
        # would be NaN, and NaN values at padding slots leak through 0-weight products
        mask = (mask & key_valid[:, None, :]) | (k == q)  # (B, T, S)
    if mask.dim() == 2:
        mask = mask[None]
    return mask[:, None]  # (B|1, 1, T, S)

"""Which keys a query sees: the attention mask of query and key times, and how many keys
causal queries see in all (what ``score_flops`` counts). Shared by the attention kinds and
the analysis, and by plugins' mixers, so it sits with the contract, not in one component.
"""

from __future__ import annotations

import torch


def visible_keys(
    query_time: torch.Tensor,
    key_time: torch.Tensor,
    window: int | None,
    key_valid: torch.Tensor | None = None,
    causal: bool = True,
) -> torch.Tensor:
    """Boolean mask (B or 1, 1, T, S): True where query t may attend to key s.

    query_time (T,), key_time (S,) or (B, S); negative key times mark empty cache slots.
    key_valid (B, S) marks keys that are real tokens rather than padding. Times are
    indices along the cache's time axis, so left padding never shifts a window. A causal
    window keeps the keys with q - k < window (the query and window - 1 before it,
    Mistral); a bidirectional one those with |q - k| <= window // 2 (ModernBERT's
    ``local_attention: 128`` sees 64 tokens on each side).
    """
    q = query_time[:, None]  # (T, 1)
    k = key_time[..., None, :]  # (S,) -> (1, S) or (B, 1, S)
    mask = k >= 0
    if causal:
        mask = mask & (k <= q)  # (T, S) or (B, T, S)
    else:
        mask = mask & torch.ones_like(q, dtype=torch.bool)  # (T, S) or (B, T, S)
    if window is not None:
        mask = mask & ((q - k).abs() <= window // 2 if not causal else q - k < window)
    if key_valid is not None:
        # a query left with no valid key (left padding) sees itself: its output is unused,
        # but a fully masked row would be NaN, and NaN leaks through 0-weight products
        mask = mask & key_valid[:, None, :]  # (B, T, S)
        mask = mask | ((k == q) & ~mask.any(dim=-1, keepdim=True))
    if mask.dim() == 2:
        mask = mask[None]
    return mask[:, None]  # (B|1, 1, T, S)


def causal_keys_seen(n_new: int, context_len: int, window: int | None) -> int:
    """Keys attended in total by ``n_new`` causal queries ending at ``context_len`` keys.

    Query i (1-based position p = context_len - n_new + i) sees min(p, window) keys. A
    helper for ``score_flops`` of attention kinds with a (possibly windowed) causal mask.
    """
    start = context_len - n_new  # positions start+1 .. context_len

    def prefix(p: int) -> int:  # sum over q=1..p of min(q, window)
        if window is None or p <= window:
            return p * (p + 1) // 2
        return window * (window + 1) // 2 + (p - window) * window

    return prefix(context_len) - prefix(start)

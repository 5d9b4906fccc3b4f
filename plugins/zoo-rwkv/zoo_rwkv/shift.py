"""RWKV's token shift: each token mixes its input with the previous token's."""

from __future__ import annotations

import torch


def shift(x: torch.Tensor, valid: torch.Tensor | None, last: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The previous token's input for every token of ``x`` (B, T, d), and the last real
    token's input to carry into the next call (B, d).

    ``last`` (B, d) is the previous call's last token (None: none, zeros as in transformers).
    Padding (``valid`` (B, T) False; left padding) enters as zeros, so the first real token
    of a row sees zeros, as it would without the padding.
    """
    if valid is not None:
        x = x * valid[..., None].to(x.dtype)  # (B, T, d)
    first = torch.zeros_like(x[:, :1]) if last is None else last[:, None].to(x.dtype)  # (B, 1, d)
    shifted = torch.cat([first, x[:, :-1]], dim=1)  # (B, T, d)
    carry = x[:, -1]  # (B, d)
    if valid is not None and last is not None:
        carry = torch.where(valid[:, -1:], carry, last.to(x.dtype))  # a row ending in padding keeps its state
    return shifted, carry


def mix(x: torch.Tensor, shifted: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """x·ratio + shifted·(1 - ratio), as transformers writes it; ratio (1, 1, d)."""
    return x * ratio + shifted * (1 - ratio)  # (B, T, d)

"""Prefill and decode steps over a static KV cache (sampling and batching build on these).

``prefill`` and ``decode_step`` are separate so the harness can time each phase.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.cache import KVCache


@torch.inference_mode()
def prefill(model: nn.Module, input_ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """Run the prompt (B, T) through the model, filling the cache; last logits (B, vocab)."""
    return model(input_ids, cache=cache, last_only=True)[:, -1]


@torch.inference_mode()
def decode_step(model: nn.Module, token: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """One token per row (B, 1) through the model; logits (B, vocab)."""
    return model(token, cache=cache)[:, -1]

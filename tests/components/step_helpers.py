"""Helpers of the one-call step tests: one prefilled cache stepped two ways."""

from __future__ import annotations

import copy

import torch

from zoo.model.cache import KVCache
from zoo.model.generation import decode_step


def twin_cache(cache: KVCache) -> KVCache:
    """A copy of ``cache`` whose tensors are its own: both paths step from the same prefilled state."""
    twin = copy.copy(cache)
    twin.layers = [{name: t.clone() for name, t in layer.items()} for layer in cache.layers]
    twin.position, twin.pad_count = cache.position.clone(), cache.pad_count.clone()
    return twin


def decode_each(model: torch.nn.Module, cache: KVCache, ids: torch.Tensor) -> torch.Tensor:
    """Logits (1, T, V) of ``ids`` (1, T) decoded one token a step into ``cache``."""
    return torch.stack([decode_step(model, ids[:, t : t + 1], cache) for t in range(ids.shape[1])], 1)

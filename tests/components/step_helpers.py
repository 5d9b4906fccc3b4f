"""Helpers of the one-call step tests: one prefilled cache stepped two ways."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import pytest
import torch

from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill


def twin_cache(cache: KVCache) -> KVCache:
    """A copy of ``cache`` whose tensors are its own: both paths step from the same prefilled state."""
    twin = copy.copy(cache)
    twin.layers = [{name: t.clone() for name, t in layer.items()} for layer in cache.layers]
    twin.position, twin.pad_count = cache.position.clone(), cache.pad_count.clone()
    return twin


def decode_each(model: torch.nn.Module, cache: KVCache, ids: torch.Tensor) -> torch.Tensor:
    """Logits (1, T, V) of ``ids`` (1, T) decoded one token a step into ``cache``."""
    return torch.stack([decode_step(model, ids[:, t : t + 1], cache) for t in range(ids.shape[1])], 1)


def both_ways(
    model: torch.nn.Module, ids: torch.Tensor, monkeypatch: pytest.MonkeyPatch, declined: Sequence[tuple[object, str]]
) -> tuple[torch.Tensor, torch.Tensor, KVCache, KVCache]:
    """Logits (1, T, V) of ``ids[:, 5:]`` decoded after a prefill of ``ids[:, :5]`` through the
    one-call steps and, from a copy of the same cache, with each ``(owner, name)`` of
    ``declined`` (a ``_token_step``) returning None, so the modules make their own calls; and
    both caches."""
    with torch.no_grad():
        cache = KVCache(model, 1, 12)
        prefill(model, ids[:, :5], cache)
        twin = twin_cache(cache)
        fused = decode_each(model, cache, ids[:, 5:])
        with monkeypatch.context() as off:
            for owner, name in declined:
                off.setattr(owner, name, lambda *args: None)
            per_module = decode_each(model, twin, ids[:, 5:])
    return fused, per_module, cache, twin

"""A static, preallocated KV cache laid out by what each attention module declares.

Shapes are fixed at allocation and every write is in place (as gpt-fast does), so a decode
step has static shapes. The cache knows no attention kind: each layer's tensors are whatever
that layer's ``cache_layout`` declared, and the layer itself reads and writes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from zoo.errors import GenerationError


@dataclass
class LayerCache:
    """One layer's view of the cache for one forward call."""

    tensors: dict[str, torch.Tensor]
    time: torch.Tensor  # (T,) cache time index of each token in this call
    key_valid: torch.Tensor | None  # (B, max_len) False where a time slot holds padding
    max_len: int


class KVCache:
    """Per-layer cache tensors plus the bookkeeping shared by all layers.

    ``length`` counts the time slots written so far; ``key_valid`` (B, max_len), when set,
    marks padding slots (left-padded batches) that no query may attend to. Neither is part
    of the KV bytes, which are exactly the declared tensors.
    """

    def __init__(
        self,
        model: nn.Module,
        batch_size: int,
        max_len: int,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        reference = next(model.parameters())
        dtype = dtype or reference.dtype
        device = torch.device(device) if device is not None else reference.device
        self.batch_size = batch_size
        self.max_len = max_len
        self.dtype = dtype
        self.device = device
        self.layers: list[dict[str, torch.Tensor]] = [
            {name: torch.zeros(t.shape, dtype=t.dtype or dtype, device=device) for name, t in layout.items()}
            for layout in model.cache_layout(batch_size, max_len)  # type: ignore[operator]
        ]
        self.key_valid: torch.Tensor | None = None
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the layers' declared cache tensors."""
        return sum(t.numel() * t.element_size() for layer in self.layers for t in layer.values())

    def advance(self, n_tokens: int) -> torch.Tensor:
        """Reserve the next ``n_tokens`` time slots; returns their indices (T,)."""
        if self.length + n_tokens > self.max_len:
            raise GenerationError(
                f"cache: {self.length} + {n_tokens} tokens exceed the cache's max_len={self.max_len}; "
                "allocate a larger cache"
            )
        time = torch.arange(self.length, self.length + n_tokens, device=self.device)
        self.length += n_tokens
        return time

    def layer(self, index: int, time: torch.Tensor) -> LayerCache:
        return LayerCache(self.layers[index], time, self.key_valid, self.max_len)

    def reset(self) -> None:
        """Forget what was written; stale slots are masked by time until overwritten."""
        self.length = 0
        self.key_valid = None

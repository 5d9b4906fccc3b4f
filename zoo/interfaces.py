"""What each component family must provide, and the small types they share.

Factories are called per family as follows (dependency injection: modules receive built
modules and plain numbers, never the whole config):

- norm:       ``factory(options, dim) -> nn.Module`` with ``forward(x) -> x``.
- positional: ``factory(options, ctx) -> Positional``.
- attention:  ``factory(options, ctx) -> Attention``; ``forward(x, positions, cache=None)``
  and ``cache_layout(batch_size, max_len) -> dict[str, CacheTensor]``. Optionally
  ``score_flops(n_new, context_len) -> int``: the FLOPs of attending (scores and the
  weighted sum of values, not the projections) for ``n_new`` causal queries that end at
  ``context_len`` keys in total; the roofline (``zoo.analysis.flops_per_token``) needs it
  and raises a ``PluginError`` naming the module when it is missing.
- ffn:        ``factory(options, ctx) -> nn.Module`` with ``forward(x) -> x``; a mixture of
  experts also defines ``active_param_count() -> int``.
- block:      ``factory(options, ctx, attention=..., ffn=...) -> nn.Module`` with
  ``forward(x, positions, cache=None) -> x``; it makes its norms with ``ctx.make_norm(dim)``.

Attention options must expose ``n_heads`` and ``head_dim`` (and ``rope_head_dim`` when only
part of each head is rotated, as latent attention does): positional encodings read them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import torch
from pydantic import ConfigDict
from torch import nn

from zoo.strict_numbers import StrictNumbers

if TYPE_CHECKING:
    from zoo.model_spec import LayerSpec


class Options(StrictNumbers):
    """Base of every component's options: unknown keys are errors, values are immutable.

    ``reset_on_kind_change`` names options that a spec must not carry over when another kind
    replaces this one (``mqa`` fixes ``n_kv_heads``; carrying 8 over would contradict it).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    reset_on_kind_change: ClassVar[frozenset[str]] = frozenset()


@dataclass(frozen=True)
class BuildContext:
    """What a factory may know about where its module goes."""

    d_model: int
    n_layers: int
    layer_index: int
    vocab_size: int
    max_seq_len: int
    layer: LayerSpec
    make_norm: Callable[[int], nn.Module]


@dataclass(frozen=True)
class CacheTensor:
    """One tensor an attention layer keeps between decode steps.

    ``dtype=None`` means the cache's dtype (the model's, unless asked otherwise). KV-cache
    bytes are summed from these declarations, so analysis and allocation cannot disagree.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype | None = None

    def nbytes(self, default_dtype: torch.dtype) -> int:
        dtype = self.dtype or default_dtype
        return math.prod(self.shape) * dtype.itemsize


class Rotation(Protocol):
    """Rotates queries and keys by position (RoPE and its kin)."""

    def __call__(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


@dataclass
class Positions:
    """Positions of the tokens in one forward call, with what each layer's encoding derives.

    ``ids`` is (B, T) of absolute positions. ``rotation`` is computed once per forward per
    distinct positional module and shared by every layer that uses it.
    """

    ids: torch.Tensor  # (B, T) int64
    positional: Positional
    rotation: Rotation | None = None
    _bias_cache: dict[Any, torch.Tensor] = field(default_factory=dict)

    def rotate(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.rotation is None:
            return q, k
        return self.rotation(q, k)

    def score_bias(self, key_positions: torch.Tensor, n_heads: int) -> torch.Tensor | None:
        """Additive attention-score bias (B, H, T, S) for keys at ``key_positions`` (B, S)."""
        return self.positional.score_bias(self.ids, key_positions, n_heads)


class Positional(nn.Module):
    """Base of positional encodings: override whichever of the three hooks applies."""

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Add to token embeddings (learned, sinusoidal). x: (B, T, d); positions: (B, T)."""
        return x

    def rotation(self, positions: torch.Tensor) -> Rotation | None:
        """A rotation of q and k for these (B, T) positions, or None."""
        return None

    def score_bias(
        self, query_positions: torch.Tensor, key_positions: torch.Tensor, n_heads: int
    ) -> torch.Tensor | None:
        """An additive bias on attention scores (ALiBi), or None."""
        return None

    def init_buffers(self) -> None:
        """Recompute non-persistent buffers after the module left the meta device."""


@runtime_checkable
class Attention(Protocol):
    def forward(self, x: torch.Tensor, positions: Positions, cache: Any = None) -> torch.Tensor: ...

    def cache_layout(self, batch_size: int, max_len: int) -> dict[str, CacheTensor]: ...


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

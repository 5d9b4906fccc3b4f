"""The registered Titans kinds of the ``attention`` family (token mixers).

- ``titans-mal``, memory as a layer: the neural memory is the layer's token mixer (section
  4.3; the paper's MAL stacks it before sliding-window attention: a hybrid spec whose other
  layers are ``gqa`` with a ``window``, as the ``titans-mal`` preset does).
- ``titans-mag``, memory as a gate (section 4.2): sliding-window attention and the memory
  read the same input; the output is ``norm(y_attn) * sigmoid(norm(y_mem))``, both norms
  with learned vector weights ("normalize the outputs using learnable vector-valued weights,
  followed by a non-linearity").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt, model_validator
from torch import nn

from zoo.parts import (
    Attention,
    AttentionOptions,
    BuildContext,
    LayerState,
    Positions,
    StateTensor,
    TokenMixer,
)
from zoo_titans.memory import MemoryOptions, NeuralMemory

WINDOWS = ("conv",)  # state tensors in the cache's dtype; the memory's weights are state_dtype


def memory_layout(memory: NeuralMemory, batch_size: int, prefix: str = "") -> dict[str, StateTensor]:
    """The memory's per-sequence tensors, as the cache allocates them."""
    return {
        prefix + name: StateTensor(shape, None if name in WINDOWS else memory.state_dtype, per="sequence")
        for name, shape in memory.state_shapes(batch_size).items()
    }


def sub_state(state: LayerState | None, prefix: str) -> LayerState | None:
    """The view of ``state`` holding the tensors named ``prefix...``, prefix removed."""
    if state is None:
        return None
    tensors = {n[len(prefix) :]: t for n, t in state.tensors.items() if n.startswith(prefix)}
    return dataclasses.replace(state, tensors=tensors)


def valid_tokens(positions: Positions, state: LayerState | None) -> torch.Tensor | None:
    """(B, T) False at padding tokens: the cache's view when cached, the mask otherwise."""
    return positions.key_valid if state is None else state.token_valid


class TitansMAL(TokenMixer):
    """``titans-mal``: the neural memory alone as the token mixer."""

    def __init__(self, options: MemoryOptions, ctx: BuildContext) -> None:
        super().__init__()
        self.memory = NeuralMemory(options, ctx)

    def forward(self, x: torch.Tensor, positions: Positions, state: LayerState | None = None) -> torch.Tensor:
        return self.memory(x, state, valid_tokens(positions, state))  # (B, T, d)

    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        return memory_layout(self.memory, batch_size)

    def score_flops(self, n_new: int, context_len: int) -> int:
        return self.memory.score_flops(n_new)

    def executed_score_flops(self, n_new: int, context_len: int) -> int:
        return self.memory.executed_score_flops(n_new)

    def matmul_param_count(self) -> int:
        return self.memory.matmul_param_count()


class MAGOptions(MemoryOptions):
    """The memory's options and the sliding-window attention's beside it (same heads)."""

    tiny: ClassVar[Mapping[str, Any]] = {**MemoryOptions.tiny, "n_kv_heads": 2}

    n_kv_heads: PositiveInt | None = Field(None, description="attention's key/value heads; default n_heads")
    window: PositiveInt | None = Field(4096, description="attention's sliding window; null: full attention")
    qk_norm: bool = Field(False, description="norm (the model's norm kind) on each attention head of q and k")
    bias: bool = Field(False, description="bias on attention's q, k and v projections")

    @model_validator(mode="after")
    def _check_heads(self) -> MAGOptions:
        if self.n_heads % (self.n_kv_heads or self.n_heads):
            raise ValueError(
                f"n_kv_heads: n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads}; "
                "allowed: a divisor of n_heads"
            )
        return self


def attention_options(options: MAGOptions, ctx: BuildContext, window: int | None) -> AttentionOptions:
    return AttentionOptions(
        n_heads=options.n_heads,
        n_kv_heads=options.n_kv_heads,
        head_dim=options.head_dim or ctx.d_model // options.n_heads,
        qk_norm=options.qk_norm,
        bias=options.bias,
        window=window,
    )


class TitansMAG(TokenMixer):
    """``titans-mag``: sliding-window attention gated by the neural memory."""

    def __init__(self, options: MAGOptions, ctx: BuildContext) -> None:
        super().__init__()
        self.attention = Attention(attention_options(options, ctx, options.window), ctx)
        self.memory = NeuralMemory(options, ctx)
        self.attention_scale = nn.Parameter(torch.empty(ctx.d_model))
        self.memory_scale = nn.Parameter(torch.empty(ctx.d_model))
        self.eps = options.eps
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if not self.attention_scale.is_meta:
            nn.init.ones_(self.attention_scale)
            nn.init.ones_(self.memory_scale)

    def forward(self, x: torch.Tensor, positions: Positions, state: LayerState | None = None) -> torch.Tensor:
        y = self.attention(x, positions, sub_state(state, "attention."))  # (B, T, d)
        m = self.memory(x, sub_state(state, "memory."), valid_tokens(positions, state))  # (B, T, d)
        d = (x.shape[-1],)
        gate = torch.sigmoid(F.rms_norm(m.float(), d, eps=self.eps) * self.memory_scale.float())
        return (F.rms_norm(y.float(), d, eps=self.eps) * self.attention_scale.float() * gate).to(x.dtype)

    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        """Attention's K/V ring (per token, at most ``window`` slots) and the memory's state."""
        kv = self.attention.state_layout(batch_size, max_len, memory_len)
        return {**{f"attention.{n}": t for n, t in kv.items()}, **memory_layout(self.memory, batch_size, "memory.")}

    def score_flops(self, n_new: int, context_len: int) -> int:
        return self.attention.score_flops(n_new, context_len) + self.memory.score_flops(n_new)

    def executed_score_flops(self, n_new: int, context_len: int) -> int:
        return self.attention.executed_score_flops(n_new, context_len) + self.memory.executed_score_flops(n_new)

    def matmul_param_count(self) -> int:
        return self.attention.matmul_param_count() + self.memory.matmul_param_count()


def build_mal(options: MemoryOptions, ctx: BuildContext) -> TitansMAL:
    return TitansMAL(options, ctx)


def build_mag(options: MAGOptions, ctx: BuildContext) -> TitansMAG:
    return TitansMAG(options, ctx)

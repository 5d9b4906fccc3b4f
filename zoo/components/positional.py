"""Positional encodings: learned absolute, sinusoidal, RoPE (with scalings), ALiBi, none."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from pydantic import Field
from torch import nn

from zoo.components.rope import RopeRotation, RopeScaling, rope_attention_factor, rope_cos_sin, rope_frequencies
from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, Positional, Rotation
from zoo.specs.options import Options


class StackPositional(Positional):
    """A positional encoding that reads nothing of its layer: one module per stack and spec
    (a learned table is one table, whichever mixers its layers have)."""

    @classmethod
    def layer_key(cls, options: Options, ctx: BuildContext) -> None:
        return None


class NoPositionalOptions(Options):
    pass


class LearnedOptions(Options):
    max_positions: int | None = Field(None, gt=0, description="table size; default max_seq_len + offset")
    offset: int = Field(0, ge=0, description="table row = position + offset (BART, RoBERTa: 2)")
    count_tokens: bool = Field(
        False, description="uncached calls number only real tokens; padding takes row offset - 1 (RoBERTa)"
    )
    dim: int | None = Field(None, gt=0, description="table width; default d_model (ELECTRA: embedding_size)")


class SinusoidalOptions(Options):
    base: float = Field(10000.0, gt=0)


class RopeOptions(Options):
    theta: float = Field(10000.0, gt=0)
    scaling: RopeScaling | None = None
    partial_rotary_factor: float = Field(1.0, gt=0, le=1)
    interleaved: bool = Field(False, description="rotate adjacent pairs (GPT-J, DeepSeek) not halves")


class AlibiOptions(Options):
    max_bias: float = Field(8.0, gt=0)


class NoPositional(StackPositional):
    """No positional information (NoPE): causal masking alone orders the tokens."""


class LearnedPositional(StackPositional):
    """A learned table of absolute position embeddings added to token embeddings (GPT-2)."""

    def __init__(self, max_positions: int, d_model: int, offset: int = 0, count_tokens: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_positions, d_model))
        self.offset = offset
        self.count_tokens = count_tokens
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if not self.weight.is_meta:
            nn.init.normal_(self.weight, std=0.01)

    def params_read(self, positions: int) -> int:
        """The rows of ``positions`` tokens (a lookup reads those rows, not the table)."""
        return min(positions, self.weight.shape[0]) * self.weight.shape[1]

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        rows = positions + self.offset if self.offset else positions
        return x + self.weight[rows].to(x.dtype)  # (B, T, d)

    def position_ids(self, default: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        if not self.count_tokens or valid is None:
            return default
        counted = valid.long().cumsum(dim=1) - 1  # (B, T): 0.. over real tokens
        return torch.where(valid, counted, torch.full_like(counted, -1))


class SinusoidalPositional(StackPositional):
    """The fixed sin/cos table of 'Attention is all you need', added to token embeddings."""

    def __init__(self, d_model: int, base: float) -> None:
        super().__init__()
        self.d_model = d_model
        self.base = base

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        half = torch.arange(0, self.d_model, 2, device=x.device, dtype=torch.float32)
        angles = positions[..., None].float() / (self.base ** (half / self.d_model))  # (B, T, d/2)
        table = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)[..., : self.d_model]
        return x + table.to(x.dtype)  # (B, T, d)


class Rope(Positional):
    """Rotary embedding; frequencies are recomputed, never stored in checkpoints."""

    def __init__(self, options: RopeOptions, head_dim: int) -> None:
        super().__init__()
        self.options = options
        rot_dim = int(head_dim * options.partial_rotary_factor)
        self.rot_dim = rot_dim - rot_dim % 2
        self.register_buffer("inv_freq", torch.empty(self.rot_dim // 2), persistent=False)
        self.attention_factor = 1.0
        self.init_buffers()

    @classmethod
    def layer_key(cls, options: Options, ctx: BuildContext) -> int:
        """The channels per head it rotates depend on the layer's mixer (0: no heads)."""
        return _attention_geometry(ctx)

    def init_buffers(self) -> None:
        """The frequencies, made on the CPU (float32 always, whatever the model's dtype); on the
        meta device none are made: an analysis allocates nothing, whatever head_dim a file says."""
        if self.inv_freq.is_meta:
            self.attention_factor = rope_attention_factor(self.options.scaling)
            return
        inv_freq, self.attention_factor = rope_frequencies(self.rot_dim, self.options.theta, self.options.scaling)
        self.inv_freq = inv_freq.to(self.inv_freq.device)

    def rotation(self, positions: torch.Tensor) -> Rotation:
        cos, sin = rope_cos_sin(positions, self.inv_freq, self.attention_factor)
        return RopeRotation(cos, sin, self.options.interleaved)

    def extra_repr(self) -> str:
        return f"rot_dim={self.rot_dim}, theta={self.options.theta}, scaling={self.options.scaling}"


def alibi_slopes(n_heads: int, max_bias: float = 8.0) -> list[float]:
    """Per-head slopes of ALiBi (Press et al.), extended for head counts not a power of 2."""
    closest = 2 ** math.floor(math.log2(n_heads))
    base = 2.0 ** (-max_bias / closest)
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest < n_heads:
        extra = 2.0 ** (-max_bias / (2 * closest))
        slopes += [extra ** (2 * i + 1) for i in range(n_heads - closest)]
    return slopes


class Alibi(StackPositional):
    """Linear biases on attention scores by query-key distance; no parameters."""

    def __init__(self, max_bias: float) -> None:
        super().__init__()
        self.max_bias = max_bias
        self._slopes: dict[tuple[int, torch.device], torch.Tensor] = {}  # per head count and device (not state)

    def score_bias(self, query_positions: torch.Tensor, key_positions: torch.Tensor, n_heads: int) -> torch.Tensor:
        slopes = self._slopes_on(n_heads, query_positions)  # (H,)
        distance = key_positions[:, None, :] - query_positions[:, :, None]  # (B, T, S)
        return slopes[None, :, None, None] * distance[:, None].float()  # (B, H, T, S)

    def _slopes_on(self, n_heads: int, like: torch.Tensor) -> torch.Tensor:
        """The slopes (H,) on ``like``'s device, made once: made from a Python list every step,
        they were a blocking host-to-device copy of every CUDA decode step (a copy from pageable
        memory waits for the stream). Traced graphs and fake tensors get a fresh tensor (a kept
        one would outlive its mode)."""
        key, kept = (n_heads, like.device), not torch.compiler.is_compiling() and type(like) is torch.Tensor
        if kept and key in self._slopes:
            return self._slopes[key]
        slopes = torch.tensor(alibi_slopes(n_heads, self.max_bias), device=like.device)  # (H,)
        if kept:
            self._slopes[key] = slopes
        return slopes


def _attention_geometry(ctx: BuildContext) -> int:
    """Channels rotated per head; 0 for a mixer without heads (a recurrent layer)."""
    attention = ctx.layer.attention.options
    rope_dim = getattr(attention, "rope_head_dim", None)
    return int(rope_dim or getattr(attention, "head_dim", None) or 0)


def build_none(options: NoPositionalOptions, ctx: BuildContext) -> Positional:
    """No positional encoding (NoPE)."""
    return NoPositional()


def build_learned(options: LearnedOptions, ctx: BuildContext) -> Positional:
    """Learned absolute position embeddings (GPT-2)."""
    size = options.max_positions or ctx.max_seq_len + options.offset
    return LearnedPositional(size, options.dim or ctx.d_model, options.offset, options.count_tokens)


def build_sinusoidal(options: SinusoidalOptions, ctx: BuildContext) -> Positional:
    """Fixed sinusoidal position embeddings."""
    return SinusoidalPositional(ctx.d_model, options.base)


def build_rope(options: RopeOptions, ctx: BuildContext) -> Positional:
    """Rotary position embedding with optional llama3 / YaRN / linear scaling."""
    return Rope(options, _attention_geometry(ctx))


def build_alibi(options: AlibiOptions, ctx: BuildContext) -> Positional:
    """ALiBi attention biases."""
    return Alibi(options.max_bias)


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register("positional", "none", build_none, options=NoPositionalOptions, module=NoPositional)
    register("positional", "learned", build_learned, options=LearnedOptions, module=LearnedPositional)
    register("positional", "sinusoidal", build_sinusoidal, options=SinusoidalOptions, module=SinusoidalPositional)
    register("positional", "rope", build_rope, options=RopeOptions, module=Rope)
    register("positional", "alibi", build_alibi, options=AlibiOptions, module=Alibi)

"""Blocks wire one norm kind, an attention and an FFN: pre-norm, post-norm, parallel, sandwich."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field
from torch import nn

from zoo.hookspecs import hookimpl
from zoo.interfaces import BuildContext, Options, Positions


class PreNormOptions(Options):
    attn_norm: bool = Field(True, description="norm before attention; ModernBERT's layer 0 has none (its input is the normed embedding)")


class PostNormOptions(Options):
    pass


class ParallelOptions(Options):
    shared_norm: bool = Field(True, description="one norm feeds both branches (GPT-J); false: one each (NeoX)")


class SandwichOptions(Options):
    pass


class PreNormBlock(nn.Module):
    """x + attn(norm(x)), then x + ffn(norm(x)) (GPT-2, Llama, Qwen)."""

    def __init__(self, ctx: BuildContext, attention: nn.Module, ffn: nn.Module, attn_norm: bool = True) -> None:
        super().__init__()
        self.attn_norm = ctx.make_norm(ctx.d_model) if attn_norm else nn.Identity()
        self.attention = attention
        self.ffn_norm = ctx.make_norm(ctx.d_model)
        self.ffn = ffn

    def forward(self, x: torch.Tensor, positions: Positions, cache: Any = None) -> torch.Tensor:
        x = x + self.attention(self.attn_norm(x), positions, cache)  # (B, T, d)
        return x + self.ffn(self.ffn_norm(x))


class PostNormBlock(nn.Module):
    """norm(x + attn(x)), then norm(x + ffn(x)) (the original Transformer, BERT)."""

    def __init__(self, ctx: BuildContext, attention: nn.Module, ffn: nn.Module) -> None:
        super().__init__()
        self.attention = attention
        self.attn_norm = ctx.make_norm(ctx.d_model)
        self.ffn = ffn
        self.ffn_norm = ctx.make_norm(ctx.d_model)

    def forward(self, x: torch.Tensor, positions: Positions, cache: Any = None) -> torch.Tensor:
        x = self.attn_norm(x + self.attention(x, positions, cache))
        return self.ffn_norm(x + self.ffn(x))


class ParallelBlock(nn.Module):
    """x + attn(norm(x)) + ffn(norm(x)): both branches read the same input (GPT-J, PaLM)."""

    def __init__(self, ctx: BuildContext, attention: nn.Module, ffn: nn.Module, shared_norm: bool) -> None:
        super().__init__()
        self.attn_norm = ctx.make_norm(ctx.d_model)
        self.attention = attention
        self.ffn_norm = None if shared_norm else ctx.make_norm(ctx.d_model)
        self.ffn = ffn

    def forward(self, x: torch.Tensor, positions: Positions, cache: Any = None) -> torch.Tensor:
        h = self.attn_norm(x)
        h_ffn = h if self.ffn_norm is None else self.ffn_norm(x)
        return x + self.attention(h, positions, cache) + self.ffn(h_ffn)


class SandwichBlock(nn.Module):
    """Norms before and after each branch (Gemma 2 and 3): four norms per block."""

    def __init__(self, ctx: BuildContext, attention: nn.Module, ffn: nn.Module) -> None:
        super().__init__()
        self.attn_norm = ctx.make_norm(ctx.d_model)
        self.attention = attention
        self.post_attn_norm = ctx.make_norm(ctx.d_model)
        self.ffn_norm = ctx.make_norm(ctx.d_model)
        self.ffn = ffn
        self.post_ffn_norm = ctx.make_norm(ctx.d_model)

    def forward(self, x: torch.Tensor, positions: Positions, cache: Any = None) -> torch.Tensor:
        x = x + self.post_attn_norm(self.attention(self.attn_norm(x), positions, cache))
        return x + self.post_ffn_norm(self.ffn(self.ffn_norm(x)))


def build_pre_norm(options: PreNormOptions, ctx: BuildContext, attention: nn.Module, ffn: nn.Module) -> nn.Module:
    """Pre-norm residual block."""
    return PreNormBlock(ctx, attention, ffn, options.attn_norm)


def build_post_norm(options: PostNormOptions, ctx: BuildContext, attention: nn.Module, ffn: nn.Module) -> nn.Module:
    """Post-norm residual block."""
    return PostNormBlock(ctx, attention, ffn)


def build_parallel(options: ParallelOptions, ctx: BuildContext, attention: nn.Module, ffn: nn.Module) -> nn.Module:
    """Parallel attention and FFN branches."""
    return ParallelBlock(ctx, attention, ffn, options.shared_norm)


def build_sandwich(options: SandwichOptions, ctx: BuildContext, attention: nn.Module, ffn: nn.Module) -> nn.Module:
    """Sandwich norms around both branches (Gemma 3)."""
    return SandwichBlock(ctx, attention, ffn)


@hookimpl
def zoo_register_components(register):  # type: ignore[no-untyped-def]
    register("block", "pre_norm", build_pre_norm, options=PreNormOptions)
    register("block", "post_norm", build_post_norm, options=PostNormOptions)
    register("block", "parallel", build_parallel, options=ParallelOptions)
    register("block", "sandwich", build_sandwich, options=SandwichOptions)

"""Blocks wire one norm kind, a token mixer, an optional cross-attention and an optional FFN:
pre-norm, post-norm, parallel, sandwich.

A block whose FFN kind is ``none`` gets ``ffn=None`` and has neither the FFN branch nor its
norm (Mamba's block: x + mixer(norm(x))). Pre- and post-norm blocks take a cross-attention
(encoder-decoder decoders) between the self-attention and the FFN, and say so
(``takes_cross_attention``); the model refuses one for the others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
from pydantic import Field
from torch import nn

from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import Block, BuildContext, CrossMixer, FeedForward, Norm, Positions, TokenMixer, TokenNorm
from zoo.specs.options import Options
from zoo.specs.state import NO_STATE, BlockState, Memory


class PreNormOptions(Options):
    attn_norm: bool = Field(
        True, description="norm before attention; ModernBERT's layer 0 has none (its input is the normed embedding)"
    )


class PostNormOptions(Options):
    pass


class ParallelOptions(Options):
    shared_norm: bool = Field(True, description="one norm feeds both branches (GPT-J); false: one each (NeoX)")


class SandwichOptions(Options):
    pass


class PreNormBlock(Block):
    """x + attn(norm(x)), [x + cross(norm(x), memory)], then x + ffn(norm(x)) (GPT-2, Llama, T5).

    An eager decode token offers each branch its norm (``Norm.token_norm``) through the part's
    ``residual_token``, which computes the whole branch in one call where it has one."""

    takes_cross_attention: ClassVar[bool] = True

    def __init__(
        self,
        ctx: BuildContext,
        attention: TokenMixer,
        ffn: FeedForward | None,
        cross_attention: CrossMixer | None = None,
        attn_norm: bool = True,
    ) -> None:
        super().__init__()
        self.attn_norm = ctx.make_norm(ctx.d_model) if attn_norm else nn.Identity()
        self.attention = attention
        self.cross_norm = None if cross_attention is None else ctx.make_norm(ctx.d_model)
        self.cross_attention = cross_attention
        self.ffn_norm = None if ffn is None else ctx.make_norm(ctx.d_model)
        self.ffn = ffn

    def forward(
        self, x: torch.Tensor, positions: Positions, state: BlockState | None = None, memory: Memory | None = None
    ) -> torch.Tensor:
        state = state or NO_STATE
        # one eager decode token: each branch, its norm and its add as one call where its part has one
        token = x.shape[0] == 1 and x.shape[1] == 1 and not torch.compiler.is_compiling()
        modules = self._modules  # each submodule read once, from nn.Module's dict
        attention, attn_norm = modules["attention"], modules["attn_norm"]
        norm = token_norm(attn_norm) if token and state.attention is not None else None
        out = None if norm is None else attention.residual_token(x, norm, positions, state.attention)
        x = out if out is not None else x + attention(attn_norm(x), positions, state.attention)  # (B, T, d)
        cross, cross_norm = modules.get("cross_attention"), modules.get("cross_norm")  # None: not a module
        if cross is not None and cross_norm is not None:
            norm = token_norm(cross_norm) if token and memory is None and state.cross_attention is not None else None
            out = None if norm is None else cross.residual_token(x, norm, state.cross_attention)
            x = out if out is not None else x + cross(cross_norm(x), memory, state.cross_attention)
        ffn, ffn_norm = modules.get("ffn"), modules.get("ffn_norm")
        if ffn is not None and ffn_norm is not None:
            norm = token_norm(ffn_norm) if token else None
            out = None if norm is None else ffn.residual_token(x, norm)
            x = out if out is not None else x + ffn(ffn_norm(x))
        return x


def token_norm(norm: nn.Module) -> TokenNorm | None:
    """``norm`` as a branch's one-token step may apply it (``Norm.token_norm``), or None: the block
    calls it (a norm that does not subclass ``Norm`` promises nothing more than a module)."""
    return norm.token_norm() if isinstance(norm, Norm) else None


class PostNormBlock(Block):
    """norm(x + attn(x)), [norm(x + cross(x, memory))], then norm(x + ffn(x)) (the original
    Transformer, BERT)."""

    takes_cross_attention: ClassVar[bool] = True

    def __init__(
        self,
        ctx: BuildContext,
        attention: TokenMixer,
        ffn: FeedForward | None,
        cross_attention: CrossMixer | None = None,
    ) -> None:
        super().__init__()
        self.attention = attention
        self.attn_norm = ctx.make_norm(ctx.d_model)
        self.cross_attention = cross_attention
        self.cross_norm = None if cross_attention is None else ctx.make_norm(ctx.d_model)
        self.ffn = ffn
        self.ffn_norm = None if ffn is None else ctx.make_norm(ctx.d_model)

    def forward(
        self, x: torch.Tensor, positions: Positions, state: BlockState | None = None, memory: Memory | None = None
    ) -> torch.Tensor:
        state = state or NO_STATE
        x = self.attn_norm(x + self.attention(x, positions, state.attention))  # (B, T, d)
        cross, cross_norm = self.cross_attention, self.cross_norm  # each submodule read once
        if cross is not None and cross_norm is not None:
            x = cross_norm(x + cross(x, memory, state.cross_attention))
        ffn, ffn_norm = self.ffn, self.ffn_norm
        if ffn is not None and ffn_norm is not None:
            x = ffn_norm(x + ffn(x))
        return x


class ParallelBlock(Block):
    """x + attn(norm(x)) + ffn(norm(x)): both branches read the same input (GPT-J, PaLM)."""

    def __init__(self, ctx: BuildContext, attention: TokenMixer, ffn: FeedForward | None, shared_norm: bool) -> None:
        super().__init__()
        self.attn_norm = ctx.make_norm(ctx.d_model)
        self.attention = attention
        self.ffn_norm = None if shared_norm or ffn is None else ctx.make_norm(ctx.d_model)
        self.ffn = ffn

    def forward(
        self, x: torch.Tensor, positions: Positions, state: BlockState | None = None, memory: Memory | None = None
    ) -> torch.Tensor:
        state = state or NO_STATE
        h = self.attn_norm(x)  # (B, T, d)
        out = x + self.attention(h, positions, state.attention)
        if self.ffn is not None:
            out = out + self.ffn(h if self.ffn_norm is None else self.ffn_norm(x))
        return out


class SandwichBlock(Block):
    """Norms before and after each branch (Gemma 2 and 3): four norms per block."""

    def __init__(self, ctx: BuildContext, attention: TokenMixer, ffn: FeedForward | None) -> None:
        super().__init__()
        self.attn_norm = ctx.make_norm(ctx.d_model)
        self.attention = attention
        self.post_attn_norm = ctx.make_norm(ctx.d_model)
        self.ffn_norm = None if ffn is None else ctx.make_norm(ctx.d_model)
        self.ffn = ffn
        self.post_ffn_norm = None if ffn is None else ctx.make_norm(ctx.d_model)

    def forward(
        self, x: torch.Tensor, positions: Positions, state: BlockState | None = None, memory: Memory | None = None
    ) -> torch.Tensor:
        state = state or NO_STATE
        x = x + self.post_attn_norm(self.attention(self.attn_norm(x), positions, state.attention))  # (B, T, d)
        if self.ffn is not None and self.ffn_norm is not None and self.post_ffn_norm is not None:
            x = x + self.post_ffn_norm(self.ffn(self.ffn_norm(x)))
        return x


def build_pre_norm(
    options: PreNormOptions,
    ctx: BuildContext,
    attention: TokenMixer,
    ffn: FeedForward | None,
    cross_attention: CrossMixer | None = None,
) -> PreNormBlock:
    """Pre-norm residual block."""
    return PreNormBlock(ctx, attention, ffn, cross_attention, options.attn_norm)


def build_post_norm(
    options: PostNormOptions,
    ctx: BuildContext,
    attention: TokenMixer,
    ffn: FeedForward | None,
    cross_attention: CrossMixer | None = None,
) -> PostNormBlock:
    """Post-norm residual block."""
    return PostNormBlock(ctx, attention, ffn, cross_attention)


def build_parallel(
    options: ParallelOptions, ctx: BuildContext, attention: TokenMixer, ffn: FeedForward | None
) -> ParallelBlock:
    """Parallel attention and FFN branches."""
    return ParallelBlock(ctx, attention, ffn, options.shared_norm)


def build_sandwich(
    options: SandwichOptions, ctx: BuildContext, attention: TokenMixer, ffn: FeedForward | None
) -> SandwichBlock:
    """Sandwich norms around both branches (Gemma 3)."""
    return SandwichBlock(ctx, attention, ffn)


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register("block", "pre_norm", build_pre_norm, options=PreNormOptions, module=PreNormBlock)
    register("block", "post_norm", build_post_norm, options=PostNormOptions, module=PostNormBlock)
    register("block", "parallel", build_parallel, options=ParallelOptions, module=ParallelBlock)
    register("block", "sandwich", build_sandwich, options=SandwichOptions, module=SandwichBlock)

"""The RWKV-4 block: the ``block`` kind ``rwkv``.

    x = x + time_mix(ln1(x));  x = x + channel_mix(ln2(x))

(transformers' ``RwkvBlock``; its ``pre_ln`` of layer 0 is zoo's embedding norm). Its FFN
shifts tokens, so it has state; a block does not own cache tensors (the cache is laid out
by token mixers), so this block asks its time mix to ``carry`` the channel mix's ``ffn_x``
and hands the mixer's cache view to the channel mix. Any other FFN kind is called as usual.

``rescale_every`` (transformers' ``rescale_every``, used in inference only): the outputs of
both branches of layer i are divided by 2^(i // rescale_every), and the residual stream is
halved after every ``rescale_every``-th layer, as transformers does in eval mode by scaling
``attention.output`` and ``feed_forward.value`` (it keeps half precision in range). In exact
arithmetic only the LayerNorms' eps sees the difference; zoo matches transformers' eval
mode (training mode in transformers does not rescale). 0 turns it off.
"""

from __future__ import annotations

import torch
from pydantic import Field, NonNegativeInt

from zoo.errors import SpecError
from zoo.specs.interfaces import Block, BuildContext, FeedForward, LayerState, Memory, Options, Positions, TokenMixer
from zoo_rwkv.channel_mix import STATE_NAME, ChannelMix
from zoo_rwkv.time_mix import TimeMix, state_valid


class RwkvBlockOptions(Options):
    rescale_every: NonNegativeInt = Field(
        0, description="halve the residual stream every this many layers, as transformers' eval mode (0: never)"
    )


class RwkvBlock(Block):
    """x + mixer(ln1(x)), then x + ffn(ln2(x)); the channel mix gets the mixer's state."""

    def __init__(self, options: RwkvBlockOptions, ctx: BuildContext, attention: TokenMixer, ffn: FeedForward | None) -> None:
        super().__init__()
        self.ln1 = ctx.make_norm(ctx.d_model)
        self.attention = attention
        self.ln2 = None if ffn is None else ctx.make_norm(ctx.d_model)
        self.ffn = ffn
        every = options.rescale_every
        self.scale = float(2 ** (ctx.layer_index // every)) if every else 1.0
        self.halve = bool(every) and (ctx.layer_index + 1) % every == 0
        if isinstance(ffn, ChannelMix):
            if not isinstance(attention, TimeMix):
                raise SpecError(
                    f"layers.{ctx.layer_index}: ffn kind 'rwkv' (channel mix) keeps its token shift in the "
                    f"state of attention kind 'rwkv'; got a {type(attention).__name__}"
                )
            attention.carry(STATE_NAME, ffn.state_shape())

    def forward(
        self, x: torch.Tensor, positions: Positions, state: LayerState | None = None, *,
        memory: Memory | None = None, cross_state: LayerState | None = None,
    ) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d)."""
        mixed = self.attention(self.ln1(x), positions, state)  # (B, T, d)
        x = x + (mixed if self.scale == 1.0 else mixed / self.scale)
        if self.ffn is not None and self.ln2 is not None:
            h = self.ln2(x)  # (B, T, d)
            if isinstance(self.ffn, ChannelMix):
                out = self.ffn(h, state, state_valid(positions, state))
            else:
                out = self.ffn(h)
            x = x + (out if self.scale == 1.0 else out / self.scale)
        return x / 2 if self.halve else x


def build_rwkv_block(
    options: RwkvBlockOptions, ctx: BuildContext, attention: TokenMixer, ffn: FeedForward | None,
    cross_attention: TokenMixer | None = None,
) -> RwkvBlock:
    """RWKV-4 block: time mix and channel mix, each after its LayerNorm, with residuals."""
    if cross_attention is not None:
        raise SpecError("block kind 'rwkv' has no cross-attention; use a decoder-only spec")
    return RwkvBlock(options, ctx, attention, ffn)

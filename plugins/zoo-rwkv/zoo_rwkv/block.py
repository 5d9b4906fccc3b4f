"""The RWKV-4 block: the ``block`` kind ``rwkv``.

    x = x + time_mix(ln1(x));  x = x + channel_mix(ln2(x))

(transformers' ``RwkvBlock``; its ``pre_ln`` of layer 0 is zoo's embedding norm). Its FFN
shifts tokens, so it has state of its own (``ffn_x``, declared by the channel mix); this
block declares ``feeds_ffn_state`` and hands a stateful FFN its cache view. Any other FFN
kind is called as usual.

``rescale_every`` (transformers' ``rescale_every``, used in inference only): the outputs of
both branches of layer i are divided by 2^(i // rescale_every), and the residual stream is
halved after every ``rescale_every``-th layer, as transformers does in eval mode by scaling
``attention.output`` and ``feed_forward.value`` (it keeps half precision in range). In exact
arithmetic only the LayerNorms' eps sees the difference; zoo matches transformers' eval
mode (training mode in transformers does not rescale). 0 turns it off.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field, NonNegativeInt

from zoo.parts import NO_STATE, Block, BlockState, BuildContext, FeedForward, Memory, Options, Positions, TokenMixer
from zoo_rwkv.time_mix import state_valid


class RwkvBlockOptions(Options):
    rescale_every: NonNegativeInt = Field(
        0, description="halve the residual stream every this many layers, as transformers' eval mode (0: never)"
    )


class RwkvBlock(Block):
    """x + mixer(ln1(x)), then x + ffn(ln2(x)); a stateful FFN (the channel mix) gets its state."""

    feeds_ffn_state: ClassVar[bool] = True

    def __init__(
        self, options: RwkvBlockOptions, ctx: BuildContext, attention: TokenMixer, ffn: FeedForward | None
    ) -> None:
        super().__init__()
        self.ln1 = ctx.make_norm(ctx.d_model)
        self.attention = attention
        self.ln2 = None if ffn is None else ctx.make_norm(ctx.d_model)
        self.ffn = ffn
        every = options.rescale_every
        self.scale = float(2 ** (ctx.layer_index // every)) if every else 1.0
        self.halve = bool(every) and (ctx.layer_index + 1) % every == 0

    def forward(
        self, x: torch.Tensor, positions: Positions, state: BlockState | None = None, memory: Memory | None = None
    ) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d)."""
        state = state or NO_STATE
        mixed = self.attention(self.ln1(x), positions, state.attention)  # (B, T, d)
        x = x + (mixed if self.scale == 1.0 else mixed / self.scale)
        if self.ffn is not None and self.ln2 is not None:
            h = self.ln2(x)  # (B, T, d)
            if self.ffn.stateful:
                out = self.ffn(h, state.ffn, state_valid(positions, state.ffn))
            else:
                out = self.ffn(h)
            x = x + (out if self.scale == 1.0 else out / self.scale)
        return x / 2 if self.halve else x


def build_rwkv_block(
    options: RwkvBlockOptions, ctx: BuildContext, attention: TokenMixer, ffn: FeedForward | None
) -> RwkvBlock:
    """RWKV-4 block: time mix and channel mix, each after its LayerNorm, with residuals."""
    return RwkvBlock(options, ctx, attention, ffn)

"""RWKV-4 channel mixing: the ``ffn`` kind ``rwkv``.

transformers' ``RwkvFeedForward``: ``time_mix_key/receptance`` (1, 1, d), ``key`` (d -> H),
``value`` (H -> d), ``receptance`` (d -> d), all bias-free; sigmoid(r) · value(relu(key)²).
It shifts tokens too, so it owns a per-sequence state ``ffn_x`` (B, d), declared in its
``state_layout`` like a mixer's; a block that declares ``feeds_ffn_state`` (``rwkv``)
hands it its cache view (``forward(x, state, valid)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from pydantic import Field, PositiveInt, ValidationInfo, model_validator
from torch import nn

from zoo.parts import (
    BuildContext,
    FeedForward,
    LayerState,
    Linear,
    Options,
    StateTensor,
)
from zoo_rwkv.shift import mix, shift

STATE_NAME = "ffn_x"


class ChannelMixOptions(Options):
    tiny: ClassVar[Mapping[str, Any]] = {"hidden": 128}

    hidden: PositiveInt | None = Field(None, description="inner width H; default 4 * d_model")

    @model_validator(mode="before")
    @classmethod
    def _default_hidden(cls, data: object, info: ValidationInfo) -> object:
        d_model = (info.context or {}).get("d_model")
        if isinstance(data, dict) and data.get("hidden") is None and isinstance(d_model, int):
            data = {**data, "hidden": 4 * d_model}
        return data


class ChannelMix(FeedForward):
    """x (B, T, d) -> sigmoid(receptance(x_r)) · value(relu(key(x_k))²) (B, T, d)."""

    stateful: ClassVar[bool] = True

    def __init__(self, options: ChannelMixOptions, ctx: BuildContext) -> None:
        super().__init__()
        d, hidden = ctx.d_model, options.hidden or 4 * ctx.d_model
        self.d_model = d
        self.layer_index, self.n_layers = ctx.layer_index, ctx.n_layers
        self.time_mix_key = nn.Parameter(torch.empty(1, 1, d))
        self.time_mix_receptance = nn.Parameter(torch.empty(1, 1, d))
        self.key = Linear(d, hidden, bias=False)
        self.receptance = Linear(d, d, bias=False)
        self.value = Linear(hidden, d, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """transformers' mixing ratios by layer depth."""
        if self.time_mix_key.is_meta:
            return
        rest = 1.0 - self.layer_index / self.n_layers
        ratio = (torch.arange(self.d_model, dtype=torch.float32, device=self.time_mix_key.device) / self.d_model)[
            None, None
        ]
        with torch.no_grad():
            self.time_mix_key.copy_(ratio**rest)
            self.time_mix_receptance.copy_(ratio**rest)

    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        """``ffn_x`` (B, d), the previous token's input: fixed per sequence."""
        return {STATE_NAME: StateTensor((batch_size, self.d_model), per="sequence")}

    def forward(
        self, x: torch.Tensor, state: LayerState | None = None, valid: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d); ``state``: this module's cache view holding ``ffn_x``
        (read and written in place); ``valid`` (B, T): False at padding."""
        tensors = None if state is None else state.tensors
        shifted, last = shift(x, valid, None if tensors is None else tensors[STATE_NAME])
        k = torch.square(torch.relu(self.key(mix(x, shifted, self.time_mix_key))))  # (B, T, H)
        r = torch.sigmoid(self.receptance(mix(x, shifted, self.time_mix_receptance)))  # (B, T, d)
        if tensors is not None:
            tensors[STATE_NAME].copy_(last)
        return r * self.value(k)  # (B, T, d)


def build_channel_mix(options: ChannelMixOptions, ctx: BuildContext) -> ChannelMix:
    """RWKV-4 channel mixing (token shift, relu² FFN with a receptance gate)."""
    return ChannelMix(options, ctx)

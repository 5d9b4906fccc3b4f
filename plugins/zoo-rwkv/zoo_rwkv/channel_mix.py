"""RWKV-4 channel mixing: the ``ffn`` kind ``rwkv``.

transformers' ``RwkvFeedForward``: ``time_mix_key/receptance`` (1, 1, d), ``key`` (d -> H),
``value`` (H -> d), ``receptance`` (d -> d), all bias-free; sigmoid(r) · value(relu(key)²).
It shifts tokens too, so it owns a per-sequence state ``ffn_x`` (B, d), declared in its
``state_layout`` like a mixer's; a block that declares ``feeds_ffn_state`` (``rwkv``)
hands it its cache view (``forward(x, state, valid)``).

Implementations (``zoo.parts.KernelChoice``, family ``rwkv-ffn``): ``reference`` (``shift``
and the mixes in PyTorch) and ``cpu-step`` (a decode step's token shift and both mixes as one
C++ call, ``cpu_step.shift_mix``, the state written in place; inference only).
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
    KernelChoice,
    LayerState,
    Linear,
    Options,
    StateTensor,
    step_ready,
    step_tensors,
)
from zoo_rwkv import cpu_step
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


class ChannelMix(FeedForward, KernelChoice):
    """x (B, T, d) -> sigmoid(receptance(x_r)) · value(relu(key(x_k))²) (B, T, d)."""

    stateful: ClassVar[bool] = True
    kernel_family = "rwkv-ffn"
    kernels = (cpu_step.KERNEL,)

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
        self.choose_kernel()
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
        if x.shape[1] == 1 and tensors is not None and cpu_step.shift_fits(tensors[STATE_NAME], x):
            if step_ready(self, x, [], valid):
                out = self._token_step(x, tensors[STATE_NAME]) if x.shape[0] == 1 else None
                return self._step(x, tensors[STATE_NAME]) if out is None else out  # (B, 1, d)
        shifted, last = shift(x, valid, None if tensors is None else tensors[STATE_NAME])
        k = torch.square(torch.relu(self.key(mix(x, shifted, self.time_mix_key))))  # (B, T, H)
        r = torch.sigmoid(self.receptance(mix(x, shifted, self.time_mix_receptance)))  # (B, T, d)
        if tensors is not None:
            tensors[STATE_NAME].copy_(last)
        return r * self.value(k)  # (B, T, d)

    def _step(self, x: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """One token (B, 1, d) on the fused shift: ``last`` (B, d) set to x in place. The
        activations run in place on the products' fresh outputs (inference only)."""
        ratios = (self.time_mix_key, self.time_mix_receptance)
        mixed = cpu_step.shift_mix(x.squeeze(1), last, ratios)  # (2, B, d)
        k = torch.relu_(self.key(mixed[0])).square_()  # (B, H)
        r = torch.sigmoid_(self.receptance(mixed[1]))  # (B, d)
        return (r * self.value(k)).unsqueeze(1)  # (B, 1, d)

    def _token_step(self, x: torch.Tensor, last: torch.Tensor) -> torch.Tensor | None:
        """One token (1, 1, d) through ``cpu_step.channel_mix_token`` (the mixes, the three
        projections and their activations in one C++ call) where the projections' layers give
        their tensors (``step_tensors``), else None; read from nn.Module's dicts."""
        modules, params = self._modules, self._parameters
        projections = step_tensors(modules["key"], modules["receptance"], modules["value"])
        if projections is None:
            return None  # a product of the layer's own
        ratios = (params["time_mix_key"], params["time_mix_receptance"])
        return cpu_step.channel_mix_token(x, last, ratios, projections)


def build_channel_mix(options: ChannelMixOptions, ctx: BuildContext) -> ChannelMix:
    """RWKV-4 channel mixing (token shift, relu² FFN with a receptance gate)."""
    return ChannelMix(options, ctx)

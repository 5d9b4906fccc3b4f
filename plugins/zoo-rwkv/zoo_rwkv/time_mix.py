"""RWKV-4 time mixing: the ``attention``-family kind ``rwkv`` (a recurrent token mixer).

Tensor names are transformers' ``RwkvSelfAttention``: ``time_decay`` and ``time_first``
(C,), ``time_mix_key/value/receptance`` (1, 1, d), and the bias-free projections ``key``,
``value``, ``receptance`` (d -> C) and ``output`` (C -> d), C = ``attention_hidden``.

State per sequence (``state_layout``): ``att_x`` (B, d), the previous token's input, and the
WKV sums ``num``, ``den``, ``max`` (B, C) in float32, plus whatever its block asks it to carry
for the channel mix (``carry``): the cache holds a token mixer's state, and an RWKV block's
FFN has state too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from pydantic import Field, PositiveInt, ValidationInfo, model_validator
from torch import nn

from zoo.parts import (
    BuildContext,
    KernelChoice,
    LayerState,
    Linear,
    Options,
    Positions,
    StateTensor,
    TokenMixer,
    step_ready,
    step_tensors,
)
from zoo_rwkv import cpu_step, cpu_wkv
from zoo_rwkv.shift import mix, shift
from zoo_rwkv.wkv import empty_state, wkv

WKV_STATE = ("num", "den", "max")


class TimeMixOptions(Options):
    tiny: ClassVar[Mapping[str, Any]] = {"attention_hidden": 32}

    attention_hidden: PositiveInt | None = Field(None, description="width C of key/value/receptance; default d_model")

    @model_validator(mode="before")
    @classmethod
    def _default_width(cls, data: object, info: ValidationInfo) -> object:
        """Store the width the model builds with (d_model when absent)."""
        d_model = (info.context or {}).get("d_model")
        if isinstance(data, dict) and data.get("attention_hidden") is None and isinstance(d_model, int):
            data = {**data, "attention_hidden": d_model}
        return data


class TimeMix(TokenMixer, KernelChoice):
    """x (B, T, d) -> output(sigmoid(r) · wkv(k, v)) (B, T, d), causal and recurrent.

    Implementations (``zoo.parts.KernelChoice``): ``reference`` (``shift`` and ``wkv`` in
    PyTorch: a parallel scan for a prompt, the recurrence's step for one token), ``cpu-scan``
    (``cpu_wkv``: a prompt's recurrence as one fused C++ loop) and ``cpu-step`` (``cpu_step``: a
    decode step's token shift and WKV step in C++); the C++ kernels are for inference only."""

    kernel_family = "rwkv"
    kernels = (cpu_wkv.KERNEL, cpu_step.KERNEL)

    def __init__(self, options: TimeMixOptions, ctx: BuildContext) -> None:
        super().__init__()
        d, c = ctx.d_model, options.attention_hidden or ctx.d_model
        self.d_model, self.channels = d, c
        self.layer_index, self.n_layers = ctx.layer_index, ctx.n_layers
        self.state_dtype = ctx.state_dtype  # the WKV sums: float32 unless the spec's state_dtype is "cache"
        self.time_decay = nn.Parameter(torch.empty(c))
        self.time_first = nn.Parameter(torch.empty(c))
        self.time_mix_key = nn.Parameter(torch.empty(1, 1, d))
        self.time_mix_value = nn.Parameter(torch.empty(1, 1, d))
        self.time_mix_receptance = nn.Parameter(torch.empty(1, 1, d))
        self.key = Linear(d, c, bias=False)
        self.value = Linear(d, c, bias=False)
        self.receptance = Linear(d, c, bias=False)
        self.output = Linear(c, d, bias=False)
        self.choose_kernel()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """RWKV-4's initialisation of the time parameters (decay speeds per channel,
        mixing ratios by layer depth); the projections are initialised by zoo."""
        if self.time_decay.is_meta:
            return
        depth = self.layer_index / max(self.n_layers - 1, 1)  # 0 to 1
        rest = 1.0 - self.layer_index / self.n_layers  # 1 to ~0
        c, device = self.channels, self.time_decay.device
        h = torch.arange(c, dtype=torch.float32, device=device)
        ratio = (torch.arange(self.d_model, dtype=torch.float32, device=device) / self.d_model)[None, None]  # (1, 1, d)
        with torch.no_grad():
            self.time_decay.copy_(-5 + 8 * (h / max(c - 1, 1)) ** (0.7 + 1.3 * depth))
            zigzag = ((h + 1) % 3 - 1) * 0.5
            self.time_first.copy_(math.log(0.3) + zigzag)
            self.time_mix_key.copy_(ratio**rest)
            self.time_mix_value.copy_(ratio**rest + 0.3 * depth)
            self.time_mix_receptance.copy_(ratio ** (0.5 * rest))

    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        """``att_x`` (B, d) in the cache dtype and the WKV sums (B, C) in ``state_dtype`` (float32
        unless the spec says ``cache``; the maths, time_decay and time_first included, is
        float32 either way): fixed per sequence, whatever the context length."""
        layout = {"att_x": StateTensor((batch_size, self.d_model), per="sequence")}
        for name in WKV_STATE:
            layout[name] = StateTensor((batch_size, self.channels), self.state_dtype, per="sequence")
        return layout

    def score_flops(self, n_new: int, context_len: int) -> int:
        """Beyond the projections, per token: the three token-shift mixes (3 per model
        channel each: 9·d) and per WKV channel the output (max, 2 exp, 4 multiply-adds,
        a divide: about 12), the state update (about 10), sigmoid and the gate (about 4):
        26·C. Independent of the context."""
        return n_new * (9 * self.d_model + 26 * self.channels)

    def forward(
        self,
        x: torch.Tensor,
        positions: Positions | None = None,
        state: LayerState | None = None,
    ) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d). With a state, ``att_x`` and the WKV sums are read and
        written in place; tokens False in ``token_valid`` (left padding) change nothing."""
        tensors = None if state is None else state.tensors
        if x.shape[1] == 1 and state is not None and tensors is not None:
            mine = [tensors[name] for name in ("att_x", *WKV_STATE)]
            if cpu_step.shift_fits(mine[0], x) and step_ready(self, x, mine[1:], state.token_valid, cpu_step.KERNEL):
                out = self._token_step(x, mine) if x.shape[0] == 1 else None
                return self._step(x, mine) if out is None else out  # (B, 1, d)
        valid = state_valid(positions, state)
        shifted, last = shift(x, valid, None if tensors is None else tensors["att_x"])
        k = self.key(mix(x, shifted, self.time_mix_key))  # (B, T, C)
        v = self.value(mix(x, shifted, self.time_mix_value))  # (B, T, C)
        r = torch.sigmoid(self.receptance(mix(x, shifted, self.time_mix_receptance)))  # (B, T, C)
        start = (
            empty_state(x.shape[0], self.channels, x.device)
            if tensors is None
            else tuple(tensors[n].float() for n in WKV_STATE)
        )
        w = -torch.exp(self.time_decay.float())  # (C,)
        if x.shape[1] > 1 and cpu_wkv.scan_ready(self, x):
            out, end = cpu_wkv.wkv_scan(w, self.time_first, k, v, valid, start)  # (B, T, C)
        else:
            out, end = wkv(w, self.time_first.float(), k, v, valid, start)  # (B, T, C)
        if tensors is not None:
            tensors["att_x"].copy_(last)
            for name, value in zip(WKV_STATE, end, strict=True):
                tensors[name].copy_(value)
        return self.output(r * out.to(x.dtype))  # (B, T, d)

    def _step(self, x: torch.Tensor, tensors: list[torch.Tensor]) -> torch.Tensor:
        """One token (B, 1, d) on the fused kernel: att_x, num, den, max updated in place."""
        ratios = (self.time_mix_key, self.time_mix_value, self.time_mix_receptance)
        mixed = cpu_step.shift_mix(x.squeeze(1), tensors[0], ratios)  # (3, B, d)
        k, v, r = self.key(mixed[0]), self.value(mixed[1]), self.receptance(mixed[2])  # (B, C) each
        out = cpu_step.wkv_step(self.time_decay, self.time_first, k, v, r, tensors[1:])  # (B, C): sigmoid(r) · wkv
        return self.output(out).unsqueeze(1)  # (B, 1, d)

    def _token_step(self, x: torch.Tensor, tensors: list[torch.Tensor]) -> torch.Tensor | None:
        """One token (1, 1, d) through ``cpu_step.time_mix_token`` (the mixes, the four
        projections and the WKV step in one C++ call) where the projections' layers give their
        tensors (``step_tensors``), else None; read from nn.Module's dicts."""
        modules, params = self._modules, self._parameters
        layers = (modules["key"], modules["value"], modules["receptance"], modules["output"])
        projections = step_tensors(*layers)  # None: a product of the layer's own
        if projections is None:
            return None
        ratios = (params["time_mix_key"], params["time_mix_value"], params["time_mix_receptance"])
        return cpu_step.time_mix_token(x, tensors, ratios, projections, params["time_decay"], params["time_first"])

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, attention_hidden={self.channels}"


def state_valid(positions: Positions | None, state: LayerState | None) -> torch.Tensor | None:
    """Which tokens are real (B, T): the cache's padding mask, else an uncached call's."""
    if state is not None:
        return state.token_valid
    return None if positions is None else positions.key_valid


def build_time_mix(options: TimeMixOptions, ctx: BuildContext) -> TimeMix:
    """RWKV-4 time mixing (WKV linear attention with token shift)."""
    return TimeMix(options, ctx)

"""Dense feed-forward networks: a plain MLP and gated variants (SwiGLU, GeGLU); ``none``
for blocks that are a token mixer alone (Mamba's)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
from pydantic import Field, PositiveInt, ValidationInfo, model_validator
from torch import nn

from zoo.components import cpu_token_ops
from zoo.components.activations import ACTIVATIONS, ActivationName
from zoo.components.fused import is_fused, project
from zoo.components.linear import Linear, step_tensors
from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, FeedForward, TokenNorm
from zoo.specs.options import Options


class _HiddenDefault(Options):
    tiny: ClassVar[Mapping[str, Any]] = {"hidden": 128}

    hidden: PositiveInt | None = Field(None, description="inner width; default 4 * d_model")
    bias: bool = False

    @model_validator(mode="before")
    @classmethod
    def _default_hidden(cls, data: Any, info: ValidationInfo) -> Any:
        d_model = (info.context or {}).get("d_model")
        if isinstance(data, dict) and data.get("hidden") is None and isinstance(d_model, int):
            data = {**data, "hidden": 4 * d_model}
        return data


class NoFFNOptions(Options):
    """No feed-forward branch: the block is its token mixer alone."""


class MLPOptions(_HiddenDefault):
    activation: ActivationName = "gelu"


class GatedOptions(_HiddenDefault):
    activation: ActivationName = "silu"


class SwiGLUOptions(_HiddenDefault):
    """Gated FFN with SiLU (Llama, Qwen, Mistral)."""


class GeGLUOptions(_HiddenDefault):
    """Gated FFN with tanh-approximated GELU (Gemma)."""


def _token_step(
    module: nn.Module, x: torch.Tensor, up_name: str, activation: int, norm: TokenNorm | None = None
) -> torch.Tensor | None:
    """One token x (1, 1, d) through ``module``'s ``up_name`` product, ``activation`` and
    down_proj in one C++ call (``cpu_token_ops.mlp_token``; with ``norm``, ``x + ffn(norm(x))``)
    where both layers give their tensors (``RowStackable.step_tensors``: float rows on the row
    kernel, int8 rows), else None. The layers are read from nn.Module's dict: through its
    ``__getattr__`` each read cost ~1 µs here (2-core Xeon)."""
    modules = module._modules
    projections = step_tensors(modules.get(up_name), modules["down_proj"])  # None: a product of the layer's own
    if projections is None:
        return None
    return cpu_token_ops.mlp_token(x, projections[0], projections[1], activation, norm)


class MLP(FeedForward):
    """up -> activation -> down."""

    def __init__(self, d_model: int, hidden: int, activation: str, bias: bool) -> None:
        super().__init__()
        self.up_proj = Linear(d_model, hidden, bias=bias)
        self.down_proj = Linear(hidden, d_model, bias=bias)
        self.act = ACTIVATIONS[activation]
        self.token_activation = cpu_token_ops.MLP_ACTIVATIONS.get(activation)  # None: no one-call token step

    def residual_token(self, x: torch.Tensor, norm: TokenNorm) -> torch.Tensor | None:
        """x + the MLP of norm(x) for one token in one C++ call where its activation has one."""
        activation = self.token_activation
        if activation is None or not x.is_cpu or not cpu_token_ops.token_calls_run():
            return None
        return _token_step(self, x, "up_proj", activation, norm)  # (1, 1, d), or None: declined

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activation = self.token_activation
        if activation is not None and x.numel() == x.shape[-1]:  # one token: maybe a decode step's one C++ call
            out = _token_step(self, x, "up_proj", activation)
            if out is not None:
                return out  # (1, 1, d)
        return self.down_proj(self.act(self.up_proj(x)))  # (B, T, d)


class GatedMLP(FeedForward):
    """down(act(gate(x)) * up(x))."""

    def __init__(self, d_model: int, hidden: int, activation: str, bias: bool) -> None:
        super().__init__()
        self.gate_proj = Linear(d_model, hidden, bias=bias)
        self.up_proj = Linear(d_model, hidden, bias=bias)
        self.down_proj = Linear(hidden, d_model, bias=bias)
        self.act = ACTIVATIONS[activation]
        self.swiglu = activation == "silu"

    def fusable_projections(self) -> dict[str, tuple[str, ...]]:
        """gate and up read the same input (``zoo.fuse_projections``)."""
        return {"gate_up_proj": ("gate_proj", "up_proj")}

    def residual_token(self, x: torch.Tensor, norm: TokenNorm) -> torch.Tensor | None:
        """x + the SwiGLU of norm(x) for one token in one C++ call (gate|up fused)."""
        if not self.swiglu or not x.is_cpu or not cpu_token_ops.token_calls_run():
            return None
        return _token_step(self, x, "gate_up_proj", cpu_token_ops.SILU_AND_MUL, norm)  # (1, 1, d), or None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu and x.numel() == x.shape[-1]:  # one token: maybe a decode step's one C++ call
            out = _token_step(self, x, "gate_up_proj", cpu_token_ops.SILU_AND_MUL)  # gate|up fused, or declined
            if out is not None:
                return out  # (1, 1, d)
        if self.swiglu and is_fused(self, "gate_up_proj") and cpu_token_ops.silu_and_mul_applies(x):
            return self.down_proj(cpu_token_ops.silu_and_mul(self.gate_up_proj(x)))  # one C++ call between
        gate, up = project(self, "gate_up_proj", ("gate_proj", "up_proj"), x)  # (B, T, hidden) each
        return self.down_proj(self.act(gate) * up)  # (B, T, d)


def build_mlp(options: MLPOptions, ctx: BuildContext) -> MLP:
    """Two-layer MLP (GPT-2: gelu_tanh with biases)."""
    return MLP(ctx.d_model, int(options.hidden or 4 * ctx.d_model), options.activation, options.bias)


def build_gated(options: GatedOptions, ctx: BuildContext) -> GatedMLP:
    """Gated MLP with a chosen activation."""
    return GatedMLP(ctx.d_model, int(options.hidden or 4 * ctx.d_model), options.activation, options.bias)


def build_swiglu(options: SwiGLUOptions, ctx: BuildContext) -> GatedMLP:
    """Gated MLP with SiLU (SwiGLU)."""
    return GatedMLP(ctx.d_model, int(options.hidden or 4 * ctx.d_model), "silu", options.bias)


def build_geglu(options: GeGLUOptions, ctx: BuildContext) -> GatedMLP:
    """Gated MLP with tanh GELU (GeGLU)."""
    return GatedMLP(ctx.d_model, int(options.hidden or 4 * ctx.d_model), "gelu_tanh", options.bias)


def build_none(options: NoFFNOptions, ctx: BuildContext) -> None:
    """No FFN: blocks skip the FFN branch and its norm."""
    return None


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register("ffn", "mlp", build_mlp, options=MLPOptions, module=MLP)
    register("ffn", "gated", build_gated, options=GatedOptions, module=GatedMLP)
    register("ffn", "swiglu", build_swiglu, options=SwiGLUOptions, module=GatedMLP)
    register("ffn", "geglu", build_geglu, options=GeGLUOptions, module=GatedMLP)
    register("ffn", "none", build_none, options=NoFFNOptions, module=FeedForward)

"""Normalisation layers: LayerNorm and RMSNorm (with Gemma's ``(1 + w)`` weight option)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from zoo.components import cpu_token_ops
from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import Norm, TokenNorm
from zoo.specs.options import Options


class LayerNormOptions(Options):
    eps: float = Field(1e-5, gt=0)
    bias: bool = True


class RMSNormOptions(Options):
    eps: float = Field(1e-6, gt=0)
    unit_offset: bool = Field(False, description="scale by (1 + w), w initialised to 0 (Gemma)")


class LayerNorm(nn.LayerNorm, Norm):
    """torch's LayerNorm, bias optional; a token on the CPU in one C++ call (``cpu_token_ops``)."""

    def __init__(self, dim: int, eps: float, bias: bool) -> None:
        super().__init__(dim, eps=eps, bias=bias)

    def token_norm(self) -> TokenNorm | None:
        """Its weight, bias and eps for a layer's one-token step (none without a weight)."""
        params = self._parameters  # nn.Module's dict: its __getattr__ costs ~1 µs a read in a decode step
        weight = params["weight"]
        return None if weight is None else TokenNorm(weight, params.get("bias"), self.eps, rms=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias  # read once (nn.Module.__getattr__ calls)
        if weight is not None and cpu_token_ops.layer_norm_applies(x, weight, bias):  # one C++ call, torch's arithmetic
            return cpu_token_ops.layer_norm(x, weight, bias, self.eps)  # (..., dim)
        return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)  # (..., dim)


class RMSNorm(Norm):
    """Root-mean-square norm, computed in float32 and cast back, as Llama and Gemma do.

    Llama multiplies the weight after casting back to the input dtype; Gemma multiplies by
    ``1 + w`` in float32 first. The order matters for bfloat16 parity with transformers.
    """

    def __init__(self, dim: int, eps: float, unit_offset: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.unit_offset = unit_offset
        self.weight = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight.is_meta:
            return
        nn.init.zeros_(self.weight) if self.unit_offset else nn.init.ones_(self.weight)

    def token_norm(self) -> TokenNorm:
        """Its weight, eps and offset for a layer's one-token step."""
        return TokenNorm(self._parameters["weight"], None, self.eps, rms=True, unit_offset=self.unit_offset)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight  # read once (an nn.Module.__getattr__ call)
        if cpu_token_ops.rms_norm_applies(x, weight):  # one C++ call, the same arithmetic
            return cpu_token_ops.rms_norm(x, weight, self.eps, self.unit_offset)  # (..., dim)
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)  # (..., dim) float32
        if self.unit_offset:
            return (normed * (1.0 + weight.float())).to(x.dtype)
        return weight * normed.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, unit_offset={self.unit_offset}"


def build_layernorm(options: LayerNormOptions, dim: int) -> nn.Module:
    """LayerNorm with optional bias (GPT-2)."""
    return LayerNorm(dim, options.eps, options.bias)


def build_rmsnorm(options: RMSNormOptions, dim: int) -> nn.Module:
    """RMSNorm, optionally with Gemma's (1 + w) weight."""
    return RMSNorm(dim, options.eps, options.unit_offset)


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register("norm", "layernorm", build_layernorm, options=LayerNormOptions)
    register("norm", "rmsnorm", build_rmsnorm, options=RMSNormOptions)

"""Activation functions by name, shared by dense and expert FFNs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F

from zoo.components import cpu_token_ops

ActivationName = Literal["relu", "gelu", "gelu_tanh", "silu"]


def gelu(x: torch.Tensor) -> torch.Tensor:
    """``F.gelu``; on the CPU outside autograd one C++ call (``cpu_token_ops.gelu``)."""
    return cpu_token_ops.gelu(x, False) if cpu_token_ops.gelu_applies(x) else F.gelu(x)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """``F.gelu(x, approximate="tanh")``; on the CPU outside autograd one C++ call, the same
    function without torch's cancellation for negative x (``cpu_token_ops.gelu``)."""
    return cpu_token_ops.gelu(x, True) if cpu_token_ops.gelu_applies(x) else F.gelu(x, approximate="tanh")


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": gelu,
    "gelu_tanh": gelu_tanh,
    "silu": F.silu,
}

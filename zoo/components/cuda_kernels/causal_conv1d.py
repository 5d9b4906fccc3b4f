"""Dao-AILab's causal-conv1d on CUDA: the short depthwise causal convolution of Mamba, Mamba2
and Gated DeltaNet, a prefill and a one-token update.

The library's API (``causal_conv1d/causal_conv1d_interface.py``, 1.4 to 1.7):

- ``causal_conv1d_fn(x, weight, bias=None, ..., activation=None)``: x (B, C, T), weight
  (C, K), bias (C,); zero left padding of K - 1; ``activation`` None or ``"silu"``; returns
  (B, C, T) in x's dtype;
- ``causal_conv1d_update(x, conv_state, weight, bias=None, activation=None)``: x (B, C) one
  token, conv_state (B, C, S) with S >= K - 1 its last inputs; the state is shifted left by
  one with x written last, in place, and the output is the convolution of its last K - 1
  entries and x: with S = K this is zoo's window (B, C, K), transformers' layout.

Only widths 2 to 4 are compiled (``fits``), and ``conv_state`` must have x's dtype (otherwise
the window is read and written by PyTorch around ``causal_conv1d_fn``). A call with a window
and several tokens (a prefill, a continued prefill) convolves the window's last K - 1 inputs
followed by the new ones and keeps the outputs of the new ones, as transformers does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from zoo.components.cuda_kernels import Library


@dataclass(frozen=True)
class Ops:
    conv: Callable[..., torch.Tensor]  # causal_conv1d_fn
    update: Callable[..., torch.Tensor]  # causal_conv1d_update


def _import() -> Ops:
    from causal_conv1d import causal_conv1d_fn, causal_conv1d_update

    return Ops(causal_conv1d_fn, causal_conv1d_update)


LIBRARY = Library("causal-conv1d", _import)


def load() -> bool:
    """Whether causal-conv1d imports (see ``Library``)."""
    return LIBRARY.load() is not None


def fits(width: int) -> bool:
    """The widths the library compiles."""
    return 2 <= width <= 4


def causal_conv(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, window: torch.Tensor | None, silu: bool
) -> torch.Tensor:
    """Depthwise causal convolution (then SiLU if ``silu``) of x (B, C, T) with weight (C, K),
    continuing from ``window`` (B, C, K), the last K inputs, updated in place; None: a
    stateless call from zero padding. Returns (B, C, T) in x's dtype."""
    ops = LIBRARY.loaded()
    activation = "silu" if silu else None
    weight = weight.to(x.dtype)
    bias = None if bias is None else bias.to(x.dtype)
    if window is None:
        return ops.conv(x.contiguous(), weight, bias, activation=activation)  # (B, C, T)
    T, K = x.shape[-1], weight.shape[-1]
    if T == 1 and window.dtype == x.dtype:
        return ops.update(x[..., 0], window, weight, bias, activation=activation)[..., None]  # (B, C, 1)
    full = torch.cat([window[..., 1:].to(x.dtype), x], dim=-1)  # (B, C, K-1+T): the history, then x
    window.copy_(full[..., -K:])
    return ops.conv(full, weight, bias, activation=activation)[..., K - 1 :]  # (B, C, T)

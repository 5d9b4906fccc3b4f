"""Depthwise causal convolution with a carried window, shared by the recurrent mixers.

Mamba, Mamba2 and Gated DeltaNet run a short (kernel 4) depthwise convolution over their
projected channels, SiLU'd, before the scan. Across calls the last ``kernel`` inputs are the
convolution's state, laid out ``(B, C, kernel)`` as transformers' caches keep it, so state
bytes match theirs. A prefill and a one-token step are the same code: the new inputs are appended to the
window, convolved without padding, and the window's tail is written back in place (one token's
convolution is a dot product per channel, without F.conv1d). The fused decode steps
(``cpu_steps``, ``cpu-step``) do the same in C++, shifting each channel's window in place
while they read it. A fresh (zeroed) window is exactly the zero padding of a full-sequence
convolution.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.components import widened


def causal_conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    window: torch.Tensor | None,
) -> torch.Tensor:
    """SiLU(depthwise causal conv of ``x``) continuing from ``window``, which is updated in place.

    x: (B, C, T); weight: (C, 1, K) as nn.Conv1d stores it; window: (B, C, K) previous inputs
    (zeros for a new sequence) or None for a stateless full-sequence call.
    """
    kernel = weight.shape[-1]
    if window is None:
        history = x.new_zeros(x.shape[0], x.shape[1], kernel - 1)  # (B, C, K-1)
    else:
        history = window[:, :, 1:].to(x.dtype)  # (B, C, K-1)
    full = torch.cat([history, x], dim=-1)  # (B, C, K-1+T)
    if window is not None:
        window.copy_(full[:, :, -kernel:])
    if x.shape[-1] == 1:  # one token: a dot product per channel (F.conv1d: 0.4-0.6 ms a call, profiled)
        out = (full * weight[:, 0].to(x.dtype)).sum(-1, keepdim=True)  # (B, C, 1)
        return F.silu(out if bias is None else out + bias.to(x.dtype)[:, None])
    weight, bias = weight.to(x.dtype), None if bias is None else bias.to(x.dtype)
    if widened.widens(full):  # no half-precision convolution kernel on this CPU (zoo/components/widened.py)
        return F.silu(widened.depthwise_conv(full, weight, bias))  # (B, C, T)
    return F.silu(F.conv1d(full, weight, bias, groups=x.shape[1]))  # (B, C, T)

"""llama.cpp's Q8 activation blocks: the numerics of zoo's few-row int4 and int8 CPU kernels.

A token row is cut into blocks of 32 inputs; each block is ``round(x / d)`` in int8 with
``d = absmax / 127`` (float32 here; llama.cpp rounds d to float16), rounded half to even as the
C++ ``std::nearbyint`` does. The kernels (zoo/quant/int4_rows_source.py,
zoo/components/int8_rows_source.py) then take integer dot products with the weight's bytes
per block; this is their one definition in PyTorch, which their references use.
"""

from __future__ import annotations

import torch

BLOCK = 32  # inputs per activation block


def quantize_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., K), K a multiple of 32 -> (values (..., K / 32, 32) int8, scales (..., K / 32) float32)."""
    blocks = x.float().reshape(*x.shape[:-1], -1, BLOCK)  # (..., B, 32)
    scales = blocks.abs().amax(-1) / 127  # (..., B)
    inverse = torch.where(scales > 0, 1 / scales, torch.zeros_like(scales))
    return torch.round(blocks * inverse[..., None]).to(torch.int8), scales


def dequantized(x: torch.Tensor) -> torch.Tensor:
    """The blocks as floats: x (..., K) -> (..., K) float32 holding ``round(x / d) * d``."""
    values, scales = quantize_blocks(x)
    return (values.float() * scales[..., None]).reshape(x.shape)

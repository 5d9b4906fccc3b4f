"""zoo's own int4 product on the CPU: a row-major block layout and a C++ kernel over it.

TODO docstring: numerics chosen by measurement.
"""

from __future__ import annotations

import types

import torch

from zoo.components.cpu_extension import cpu_extension
from zoo.quant.int4_cpu_source import SOURCE

BLOCK = 32  # inputs per 16-byte block: byte j = q[j] | q[j + 16] << 4 (GGUF Q4_0 / Q4_1)
FUNCTIONS = ["int4_rows", "int4_tiles", "int4_rows_q8"]
ROW_GRAIN = 64  # groups of 4 weight rows per thread's share at least: 256 rows
TILE = 64  # weight rows widened at once for many token rows
TILE_FROM = 8  # token rows from which the widened tiles and at::mm win


def load() -> types.ModuleType | None:
    """The compiled kernels (built once per machine), or None where they cannot be built."""
    return cpu_extension("zoo_int4_cpu", SOURCE, FUNCTIONS)


def pack(values: torch.Tensor) -> torch.Tensor:
    """Values (out, in) in 0..15 -> (out, in / 2) uint8: per block of 32 inputs, byte j holds
    value j low and value j + 16 high."""
    out_features, in_features = values.shape
    blocks = values.to(torch.uint8).reshape(out_features, in_features // BLOCK, 2, BLOCK // 2)  # (out, B, 2, 16)
    return (blocks[:, :, 0] | blocks[:, :, 1] << 4).reshape(out_features, in_features // 2).contiguous()


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """``pack``'s inverse: (out, in / 2) uint8 -> values (out, in) uint8 in 0..15."""
    out_features = packed.shape[0]
    blocks = packed.reshape(out_features, -1, 1, BLOCK // 2)  # (out, B, 1, 16)
    shifts = torch.tensor([0, 4], dtype=torch.uint8, device=packed.device).reshape(1, 1, 2, 1)
    return ((blocks >> shifts) & 15).reshape(out_features, -1)  # (out, in)


def dequantize(packed: torch.Tensor, scale_offsets: torch.Tensor) -> torch.Tensor:
    """The weight (out, in) float32: ``q * scale + offset`` per group; scale_offsets (out, G, 2)."""
    values = unpack(packed).float()  # (out, in)
    out_features, in_features = values.shape
    groups = values.view(out_features, scale_offsets.shape[1], -1)  # (out, G, g)
    so = scale_offsets.float()
    return (groups * so[..., 0:1] + so[..., 1:2]).view(out_features, in_features)


def reference(x: torch.Tensor, packed: torch.Tensor, scale_offsets: torch.Tensor) -> torch.Tensor:
    """The kernel's numerics in PyTorch: float32 rows times the dequantized weight, (M, out) float32."""
    return x.float() @ dequantize(packed, scale_offsets).T


def quantize_rows_q8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """llama.cpp's activation blocks: x (M, K) -> int8 (M, K), scales (M, K/32), scale * sum(q) (M, K/32)."""
    blocks = x.float().reshape(x.shape[0], -1, BLOCK)  # (M, B, 32)
    scales = blocks.abs().amax(-1) / 127  # (M, B)
    inverse = torch.where(scales > 0, 1 / scales, torch.zeros_like(scales))
    q = torch.round(blocks * inverse[..., None]).to(torch.int8)  # (M, B, 32)
    sums = scales * q.sum(-1, dtype=torch.int32).float()  # (M, B)
    return q.reshape(x.shape).contiguous(), scales.contiguous(), sums.contiguous()


def reference_q8(x: torch.Tensor, packed: torch.Tensor, scale_offsets: torch.Tensor) -> torch.Tensor:
    """llama.cpp's numerics in PyTorch: the int8-per-block row times the dequantized weight."""
    q, scales, _ = quantize_rows_q8(x)
    rows = (q.float().view(x.shape[0], -1, BLOCK) * scales[..., None]).view(x.shape)  # (M, K)
    return rows @ dequantize(packed, scale_offsets).T


def matmul(x: torch.Tensor, packed: torch.Tensor, scale_offsets: torch.Tensor) -> torch.Tensor:
    """``x @ W.T`` (M, in) -> (M, out) in x's dtype; inside a ``torch.compile`` graph the opaque
    op ``torch.ops.zoo.int4_mm`` (traced inline, the C++ call would break the graph)."""
    if torch.compiler.is_compiling():
        return torch.ops.zoo.int4_mm.default(x, packed, scale_offsets)
    return _matmul(x, packed, scale_offsets)


def _matmul(x: torch.Tensor, packed: torch.Tensor, scale_offsets: torch.Tensor) -> torch.Tensor:
    module = load()
    rows = x.float().contiguous()  # (M, in)
    group = x.shape[1] // scale_offsets.shape[1]
    if module is None:
        out = reference(rows, packed, scale_offsets)
    elif x.shape[0] >= TILE_FROM:
        out = module.int4_tiles(rows, packed, scale_offsets, group, TILE)
    else:
        out = module.int4_rows(rows, packed, scale_offsets, group, ROW_GRAIN)
    return out.to(x.dtype)


@torch.library.custom_op("zoo::int4_mm", mutates_args=())
def int4_mm_op(x: torch.Tensor, packed: torch.Tensor, scale_offsets: torch.Tensor) -> torch.Tensor:
    """``matmul`` as one opaque op for graphs that ``torch.compile`` traces."""
    return _matmul(x, packed, scale_offsets)


@int4_mm_op.register_fake
def _int4_mm_shape(x: torch.Tensor, packed: torch.Tensor, scale_offsets: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], packed.shape[0])  # (M, out)

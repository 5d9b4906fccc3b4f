"""zoo's own int4 product on the CPU: a row-major block layout and a C++ kernel over it.

Layout (``pack``): per output row, per block of 32 inputs, 16 bytes, byte ``j`` holding value
``j`` low and value ``j + 16`` high, as GGUF's Q4_0 / Q4_1 blocks; per (row, group) a scale
and an offset (``scale_offsets`` (out, G, 2), the model's dtype), ``w = q * scale + offset``.
One copy of the weight, read by both paths below (zoo/quant/int4_cpu_source.py):

- **Few token rows** (decode; ``M < TILE_FROM``): llama.cpp's numerics. Each token row is
  quantized to int8 per block of 32 inputs (scale = absmax / 127, round to nearest even), the
  4-bit values times those bytes are integer dot products (AVX512-VNNI ``vpdpbusd``, AVX2
  ``vpmaddubsw``, or scalar C++), scaled per block in float32; the offsets multiply each
  block's quantized sum. This is what llama.cpp computes for Q4 weights (its Q8 activation
  blocks). Chosen by measurement (``bench/int4_numerics.py``, one decode token through a
  SmolLM2-135M's 210 int4 matrices, one thread, this project's Zen 4): it ran 1.22x torch's
  int4 kernel where the exact float product (nibbles widened to float32, the group's scale
  and offset factored out of the inner loop) ran 0.84x; its cost is accuracy: against the
  float32 product with the dequantized weight, a largest error of 1.5e-2 of the largest
  output over those matrices, bfloat16 outputs (their rounding alone: 3.7e-3); a tiny GGUF
  model's decode logits within 1.1e-2 (tests/quant/test_int4_cpu.py). Unlike llama.cpp,
  the activation blocks' scales stay float32 (llama.cpp rounds them to float16).
- **Many token rows** (prefill): weight-only numerics. A tile of weight rows is widened
  once and multiplied with every token row by ``at::mm``; the weight is read from memory
  once per call. Exact (float32 tiles) for float32 and float16 rows; for bfloat16 rows the
  tile is rounded to bfloat16 and the GEMM is bfloat16's, accumulating in float32
  (``reference_tiles``): 2.0-2.1x float32's GEMM here, so a 128-token prompt of a bfloat16
  int4 model is mostly at bfloat16 GEMM speed. The per-token int8 kernel ran at 0.57x torch's kernel on a
  128-token prompt, the tiles at 0.98x.

Where the extension cannot be built, ``reference`` (the exact float product) runs. In a
``torch.compile`` graph the product is the opaque op ``torch.ops.zoo_int4.mm``.
"""

from __future__ import annotations

import types

import torch

from zoo.components.cpu_extension import cpu_extension
from zoo.quant import q8
from zoo.quant.int4_cpu_source import SOURCE

BLOCK = 32  # inputs per 16-byte block: byte j = q[j] | q[j + 16] << 4 (GGUF Q4_0 / Q4_1)
FUNCTIONS = ["int4_q8", "int4_tiles", "int4_mm"]
ROW_GRAIN = 64  # a thread's share is at least 64 groups of 4 weight rows: smaller splits lost at 2 threads
TILE = 256  # weight rows widened at once for many token rows (measured: 32 0.74x, 64 0.86x, 256 0.98x aten)
TILE_FROM = (
    24  # token rows from which the tiles run: int8 rows / tiles time 0.22 (2 rows) 0.88 (16) 1.06 (24) 1.61 (32)
)

_module: list[types.ModuleType | None] = []


def load() -> types.ModuleType | None:
    """The compiled kernels (built once per machine), or None where they cannot be built.
    Loading registers the op ``torch.ops.zoo_int4.mm`` and its shape function."""
    if not _module:
        module = cpu_extension("zoo_int4_cpu", SOURCE, FUNCTIONS)
        if module is not None:
            torch.library.register_fake("zoo_int4::mm")(_int4_mm_shape)
        _module.append(module)
    return _module[0]


def _int4_mm_shape(
    x: torch.Tensor, packed: torch.Tensor, scale_offsets: torch.Tensor, tile_from: int, tile: int, grain: int
) -> torch.Tensor:
    return x.new_empty(x.shape[0], packed.shape[0])  # (M, out)


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
    """Exact weight-only numerics in PyTorch: float32 rows times the dequantized weight, (M, out) float32."""
    return x.float() @ dequantize(packed, scale_offsets).T


def reference_tiles(x: torch.Tensor, packed: torch.Tensor, scale_offsets: torch.Tensor) -> torch.Tensor:
    """The many-row kernel's numerics in PyTorch, (M, out) float32: bfloat16 rows times the
    dequantized weight rounded to bfloat16 (a bfloat16 GEMM); other dtypes: ``reference``."""
    if x.dtype != torch.bfloat16:
        return reference(x, packed, scale_offsets)
    return x.float() @ dequantize(packed, scale_offsets).bfloat16().float().T


def reference_q8(x: torch.Tensor, packed: torch.Tensor, scale_offsets: torch.Tensor) -> torch.Tensor:
    """The few-row kernel's numerics in PyTorch: int8-per-block rows times the dequantized weight."""
    return q8.dequantized(x) @ dequantize(packed, scale_offsets).T


def matmul(x: torch.Tensor, packed: torch.Tensor, scale_offsets: torch.Tensor) -> torch.Tensor:
    """``x @ W.T`` (M, in) -> (M, out) in x's dtype. Traced, the op is the C++ kernel's own
    dispatcher op, opaque to ``torch.compile`` (the layer loads it when it is made, before any
    tracing); eager, the same C++ as a pybind call, without the dispatcher's 2 µs a call (of
    7.5 on a 192 x 576 layer; a 30-layer llama makes 210 of them a token)."""
    module = load()
    if module is None:
        return reference(x, packed, scale_offsets).to(x.dtype)
    if torch.compiler.is_compiling():
        return torch.ops.zoo_int4.mm.default(x, packed, scale_offsets, TILE_FROM, TILE, ROW_GRAIN)
    return module.int4_mm(x, packed, scale_offsets, TILE_FROM, TILE, ROW_GRAIN)

"""zoo's own int4 product on the CPU: a panel layout and a C++ kernel over it.

Layout (``pack``): weight rows in panels of ``PANEL`` = 16 (the last may hold fewer, R). Per
block of 32 inputs a panel holds R x 16 bytes in four chunks of R dwords: chunk c, lane r,
byte i holds the value of input ``32 b + 8 c + i`` of row r in its low nibble and of input
``32 b + 8 c + 4 + i`` in its high one, so one 512-bit load feeds 16 rows' 4-input integer
dots against 4 broadcast activation bytes (``vpdpbusd``), each row's sum stays in its own
lane, and no horizontal sum is left to do (llama.cpp's repacked Q4_0 x 8 layouts follow the
same idea). Per (row, group) a scale and an offset (``scale_offsets`` (out, G, 2), the
model's dtype), ``w = q * scale + offset``, ordered per panel as the group's R scales then R
offsets. Dimension 0 of both tensors counts rows, so layers whose rows are whole panels
stack and split by rows (``stack_rows``, the fused state's hooks). Measured against the
row-major blocks it replaced (GGUF's Q4 block bytes, four rows at a time; ``bench/int4_numerics.py``,
one decode token, bfloat16, this project's Zen 4): 1.53x on SmolLM2-135M's 210 matrices
(group 32) and 1.98x on 12 layers of Qwen3-0.6B's (group 128) at one thread, 1.26x and
1.75x at two. One copy of the weight, read by both paths below (zoo/quant/int4_rows_source.py, int4_cpu_source.py):

- **Few token rows** (decode; ``M < TILE_FROM``): llama.cpp's numerics. Each token row is
  quantized to int8 per block of 32 inputs (scale = absmax / 127, round to nearest even), the
  4-bit values times those bytes are integer dot products (AVX512-VNNI ``vpdpbusd``, AVX2
  ``vpmaddubsw``, or scalar C++), scaled per block in float32 and by the weight's scale per
  group; the offsets multiply each group's quantized sum. This is what llama.cpp computes
  for Q4 weights (its Q8 activation blocks). Chosen by measurement (``bench/int4_numerics.py``,
  one decode token through a SmolLM2-135M's 210 int4 matrices, one thread, this project's
  Zen 4): over row-major blocks it ran 1.28x torch's int4 kernel where the exact float
  product (nibbles widened to float32, the group's scale and offset factored out of the
  inner loop) ran 0.87x, and over panels 1.95x; its cost is accuracy: against the float32
  product with the dequantized weight, a largest error of 1.5e-2 of the largest
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

Where the extension cannot be built, ``reference`` (the exact float product) runs. Its three
functions are custom ops of ``zoo.components.cpu_ops`` (``EXTENSION``): in a ``torch.compile``
graph the product is the opaque op ``torch.ops.zoo.int4_cpu_int4_mm``, whose CPU kernel is the
C++ function itself.
"""

from __future__ import annotations

import types

import torch

from zoo.components import row_product, widened
from zoo.components.cpu_layer_steps_source import INT4_GRAIN
from zoo.components.cpu_ops import CppExtension, CppFunction
from zoo.components.tiles_source import SOURCE as TILES_SOURCE
from zoo.quant import q8
from zoo.quant.int4_cpu_source import SOURCE as TILES_AND_OP_SOURCE
from zoo.quant.int4_rows_source import SOURCE as ROWS_SOURCE

BLOCK = 32  # inputs per block: a row's 16 bytes, four of its dwords a chunk (module doc)
PANEL = 16  # weight rows interleaved per panel: one 512-bit load holds 4 bytes of each
PANEL_GRAIN = INT4_GRAIN  # a thread's share is at least 16 panels, the layer steps' too
TILE = 256  # weight rows widened at once for many token rows (measured: 32 0.74x, 64 0.86x, 256 0.98x aten)
TILE_FROM = (
    24  # token rows from which the tiles run: int8 rows / tiles time 0.22 (2 rows) 0.88 (16) 1.06 (24) 1.61 (32)
)

SOURCE = ROWS_SOURCE + TILES_SOURCE + TILES_AND_OP_SOURCE  # the extension's C++: includes, rows, tile sizes, tiles, op


def _rows_shape(x: torch.Tensor, packed: torch.Tensor, **_: object) -> torch.Tensor:
    return x.new_empty(x.shape[0], packed.shape[0])  # (M, out)


def _product_shape(x: torch.Tensor, packed: torch.Tensor, **_: object) -> torch.Tensor:
    return x.new_empty(*x.shape[:-1], packed.shape[0])  # (..., out)


EXTENSION = CppExtension(
    "zoo_int4_cpu",
    SOURCE,
    [
        CppFunction(
            "int4_q8",
            "(Tensor x, Tensor packed, Tensor scale_offsets, int grain, bool fetch_ahead) -> Tensor",
            _rows_shape,
        ),
        CppFunction("int4_tiles", "(Tensor x, Tensor packed, Tensor scale_offsets, int tile) -> Tensor", _rows_shape),
        CppFunction(
            "int4_mm",
            "(Tensor x, Tensor packed, Tensor scale_offsets, int tile_from, int tile, int grain, bool fetch_ahead)"
            " -> Tensor",
            _product_shape,
        ),
    ],
)


_MM = EXTENSION.op("int4_mm")  # bound once: a SmolLM2-135M decode step makes 210 products


def load() -> types.ModuleType | None:
    """The compiled kernels (built once per machine), or None where they cannot be built.
    Loading registers the ops' CPU kernels (their schemas and shapes are registered on import)."""
    return EXTENSION.load()


def pack(values: torch.Tensor, scale_offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Values (out, in) in 0..15 and their ``scale_offsets`` (out, G, 2) in the kernel's panel
    layout: (packed (out, in / 2) uint8, scale_offsets (out, G, 2)), each panel's rows interleaved."""
    out_features = values.shape[0]
    parts = [_panel(values[a:b], scale_offsets[a:b], lanes) for a, b, lanes in _panels(out_features)]
    return torch.cat([p for p, _ in parts]), torch.cat([so for _, so in parts])


def _panels(out_features: int) -> list[tuple[int, int, int]]:
    """(first row, end, rows a panel) of the rows in whole panels and of the last, shorter
    panel, each where there are any."""
    full = out_features - out_features % PANEL
    spans = [(0, full, PANEL), (full, out_features, out_features - full)]
    return [span for span in spans if span[1] > span[0]]


def _panel(values: torch.Tensor, so: torch.Tensor, lanes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows in panels of ``lanes`` rows -> their bytes and scales, interleaved."""
    out_features, in_features = values.shape
    v = values.to(torch.uint8).reshape(-1, lanes, in_features // BLOCK, 4, 2, 4)  # (P, R, B, chunk, low/high, 4)
    bytes_ = (v[..., 0, :] | v[..., 1, :] << 4).permute(0, 2, 3, 1, 4)  # (P, B, chunk, R, 4)
    groups = so.shape[1]
    lanes_so = so.reshape(-1, lanes, groups, 2).permute(0, 2, 3, 1)  # (P, G, 2, R)
    return bytes_.reshape(out_features, in_features // 2), lanes_so.reshape(out_features, groups, 2)


def unpack(packed: torch.Tensor, scale_offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``pack``'s inverse: (values (out, in) uint8 in 0..15, scale_offsets (out, G, 2) by row)."""
    out_features = packed.shape[0]
    parts = [_unpanel(packed[a:b], scale_offsets[a:b], lanes) for a, b, lanes in _panels(out_features)]
    return torch.cat([v for v, _ in parts]), torch.cat([so for _, so in parts])


def _unpanel(packed: torch.Tensor, so: torch.Tensor, lanes: int) -> tuple[torch.Tensor, torch.Tensor]:
    out_features, half = packed.shape
    b = packed.reshape(-1, half * 2 // BLOCK, 4, lanes, 4).permute(0, 3, 1, 2, 4)  # (P, R, B, chunk, 4)
    values = torch.stack([b & 15, b >> 4], dim=-2)  # (P, R, B, chunk, low/high, 4)
    groups = so.shape[1]
    rows_so = so.reshape(-1, groups, 2, lanes).permute(0, 3, 1, 2)  # (P, R, G, 2)
    return values.reshape(out_features, half * 2), rows_so.reshape(out_features, groups, 2)


def dequantize(packed: torch.Tensor, scale_offsets: torch.Tensor) -> torch.Tensor:
    """The weight (out, in) float32: ``q * scale + offset`` per group."""
    values, so = unpack(packed, scale_offsets)  # (out, in), (out, G, 2)
    out_features, in_features = values.shape
    groups = values.float().view(out_features, so.shape[1], -1)  # (out, G, g)
    so = so.float()
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
    """``x @ W.T`` (..., in) -> (..., out) in x's dtype. Traced, the op is the C++ kernel's own
    dispatcher op, opaque to ``torch.compile`` (the layer loads it when it is made, before any
    tracing); eager, the same C++ as a pybind call, without the dispatcher's 2 µs a call (of
    7.5 on a 192 x 576 layer; a 30-layer llama makes 210 of them a token)."""
    if not EXTENSION.available():  # built here (a trace reads the answer, cpu_ops.CppExtension.available)
        return reference(x, packed, scale_offsets).to(x.dtype)
    if widened.widens(x) and x.numel() >= TILE_FROM * x.shape[-1]:  # a prompt's tiles, GEMM slow in x's dtype here
        return matmul(x.float(), packed, scale_offsets).to(x.dtype)  # (..., out), rounded once (widened.py)
    return _MM(x, packed, scale_offsets, TILE_FROM, TILE, PANEL_GRAIN, row_product.past_cache_on())  # (..., out)

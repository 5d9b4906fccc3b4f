"""One-row int8 products on the CPU through zoo's row kernel: the tied LM head.

A decode step multiplies one row by every int8 matrix; the largest is a tied head (49152 x
576 for SmolLM2-135M, 28 MB int8), read once per token. zoo's loop (``int8_rows`` of
zoo/components/int8_rows_source.py) streams them faster than ``aten._weight_int8pack_mm``:
``python bench/int8_rows.py --rounds 7`` on this project's AMD EPYC (Zen 4), one bfloat16
row, median per-round time ratio aten / kernel at one thread: the head 2.93x (6.5 against
19.3 GB/s), a 1536 x 576 matrix 1.53x, 8192 x 2048 2.83x, 2048 x 8192 2.41x; at two threads
2.81x, 1.42x, 2.15x and 2.39x. Small matrices gain too (576 x 576: 21 against 14 µs), so
only those under ``MIN_WEIGHT_BYTES``, where either call is mostly its dispatch, keep aten's.
``ZOO_INT8_ROW_KERNEL=0`` turns it off.

Numerics (``reference``): for rows whose length is a multiple of 32 (every model's width),
llama.cpp's: the row quantized to int8 per block of 32 inputs, integer dot products
(AVX512-VNNI, AVX2 or scalar C++) scaled per block, then per weight row; as zoo's int4 decode
does (zoo/quant/int4_cpu.py) and llama.cpp for Q8_0 weights. Widening each int8 weight to
float32 instead left the loop compute-bound: ``python bench/int8_rows.py`` measured the
49152 x 576 head at 9.8 GB/s against 17-19 GB/s for a float32 matrix of that shape (one
thread); the integer loop reads it at the bandwidth. Its cost is the activation's rounding:
against the exact product, a largest error of about 0.5% of the largest output
(tests/quant/test_int8_rows.py). Other lengths keep the exact product: accumulated in float32,
scaled per row, rounded once to the input's dtype, as the aten kernel does.

A prompt's rows (``TILES_FROM`` or more, float32 or bfloat16) go through ``int8_tiles``
instead: ``TILE`` weight rows at a time widened to the rows' dtype (``qweight * scale`` in
float32, rounded as a bfloat16 model's weights are), then ``at::mm`` in that dtype. aten's
int8 kernel multiplied 128 bfloat16 rows at about a third of a bfloat16 GEMM's rate, so an
int8 qwen3-0.6b prefilled 78 tokens/s against its bfloat16 model's ~1000; the tiles took
4.2-4.5 ms against its 10.0-10.7 on qwen3-0.6b's MLP matrices, 1.3x at 24 rows (one thread).

Inside a compiled graph they are the opaque ops ``torch.ops.zoo.row_product_int8_rows`` and
``row_product_int8_tiles``. Where the kernel cannot be built the aten kernel runs.
"""

from __future__ import annotations

import os

import torch

from zoo.components import row_product
from zoo.quant import q8

ENV_SWITCH = "ZOO_INT8_ROW_KERNEL"
# the switch, read once when this module imports: an eager decode step asks before every
# call, and ``os.environ.get`` costs 0.7 µs (1.4% of SmolLM2-135M's step at two threads);
# a test or benchmark sets ``ENABLED`` itself
ENABLED = os.environ.get(ENV_SWITCH, "1") != "0"
MIN_WEIGHT_BYTES = 1 << 16  # 64 KiB: 192 x 576 took 8 µs through the kernel, 10 through aten


TILES_FROM = 24  # token rows from which int8_tiles run (aten's kernel leads below)
TILE = 256  # weight rows widened at once: 256 x in values stay in L2
TILE_DTYPES = (torch.float32, torch.bfloat16)


def reference(qweight: torch.Tensor, scales: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """What the kernel computes, in PyTorch: ``(qweight * scales[:, None]) @ x`` for one row
    ``x`` (in,), in ``x``'s dtype; ``qweight`` int8 (out, in), ``scales`` (out,). ``in`` a
    multiple of 32: ``x`` as int8 blocks (``zoo.quant.q8``), exact integer dot products per
    block, scaled per block and per row in float32; otherwise the exact float32 product."""
    if x.numel() % q8.BLOCK:
        return ((qweight.float() @ x.float()) * scales.float()).to(x.dtype)  # (out,)
    xq, xd = q8.quantize_blocks(x.float())  # (in / 32, 32) int8, (in / 32,)
    blocks = qweight.reshape(qweight.shape[0], -1, q8.BLOCK).int()  # (out, in / 32, 32)
    dots = torch.einsum("obj,bj->ob", blocks, xq.int())  # (out, in / 32) exact int32
    return ((dots.float() * xd).sum(-1) * scales.float()).to(x.dtype)  # (out,)


def enabled() -> bool:
    """True unless ``ZOO_INT8_ROW_KERNEL=0`` or the kernel cannot be built here."""
    return ENABLED and row_product.available()


def applies(x: torch.Tensor, qweight: torch.Tensor) -> bool:
    """True when ``x`` is one row on the CPU in a float dtype, outside autograd, and the
    int8 weight is large."""
    return (
        x.device.type == "cpu"
        and x.dtype in row_product.DTYPES
        and qweight.dim() == 2
        and qweight.is_contiguous()
        and qweight.shape[1] == x.shape[-1] == x.numel()
        and qweight.numel() >= MIN_WEIGHT_BYTES
        and not torch.is_grad_enabled()
        and enabled()
    )


def int8_rows(qweight: torch.Tensor, scales: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``reference`` through the kernel: one row x (..., in) -> (..., out) in ``x``'s dtype (an
    opaque op in a graph), its rows fetched ahead where the run fetches a step's weights ahead
    (``row_product.past_cache_on``)."""
    return row_product.EXTENSION.op("int8_rows")(qweight, scales, x, row_product.past_cache_on())  # (..., out)


def tiles_apply(x: torch.Tensor, qweight: torch.Tensor) -> bool:
    """True when ``x`` is ``TILES_FROM`` or more float32 or bfloat16 rows (M, in) on the CPU,
    outside autograd, for which ``int8_tiles`` beats aten's int8 kernel."""
    return (
        x.device.type == "cpu"
        and x.dtype in TILE_DTYPES
        and x.dim() == 2
        and x.shape[0] >= TILES_FROM
        and qweight.dim() == 2
        and qweight.is_contiguous()
        and qweight.shape[1] == x.shape[1]
        and not torch.is_grad_enabled()
        and enabled()
    )


def int8_tiles(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``x @ (qweight * scales[:, None]).T`` for many rows x (M, in) -> (M, out) in x's dtype:
    the weight widened to x's dtype a tile at a time, then a GEMM in that dtype (an opaque op
    in a graph)."""
    return row_product.EXTENSION.op("int8_tiles")(x, qweight, scales, TILE)  # (M, out)

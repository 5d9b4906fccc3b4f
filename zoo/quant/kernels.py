"""The products of quantized layers, per device: torch's own packed-weight kernels.

Chosen by measurement (one thread, an 8192 x 2048 weight, one bfloat16 row, this project's
Xeon; the figures and the script are in docs/architecture.md): ``aten._weight_int8pack_mm``
took 1.08 ms against 2.5 ms for the bfloat16 ``F.linear`` and 7.1 ms for ``torch.mv``;
torchao 0.18's CPU int8 weight-only layer took 19.1 ms and its int4 layer needs the ``mslk``
package, so torchao is no dependency. int4 on the CPU is zoo's own kernel over its own
layout (zoo/quant/int4_cpu.py; it replaced ``aten._weight_int4pack_mm_for_cpu``, which
streamed a decode step's packed bytes at 3-4 GB/s). On CUDA, int4 uses
``aten._weight_int4pack_mm`` (the tinygemm kernel that torchao's tensor-core-tiled int4
layout calls; it reads the packed 4-bit weight in the product). int8 on CUDA has no aten
kernel: it dequantizes into the product (``F.linear`` of the int8 weight cast, times the
scales), which inductor fuses under ``--compile`` and which eager mode runs as a cast plus a
bfloat16 GEMM, so it saves memory but not time there.

Activations go to the kernels in their own dtype; torch's CPU kernels are fast for
bfloat16 rows and slow for float32 ones (``_weight_int8pack_mm`` with float32 took 14 ms on
the shape above), which is why quantized runs default to bfloat16 (zoo/quant/__init__.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.components import widened
from zoo.errors import BenchError
from zoo.quant import int8_rows

CUDA_INNER_K_TILES = (8, 4, 2)
# aten's CPU int8 kernel in a half-precision dtype reads past rows whose width is no multiple of 16
# (torch 2.13: a segmentation fault at 24 or 40 inputs in bfloat16, float32 unaffected)
ATEN_INT8_INPUTS = 16  # tinygemm's tile parameter, the largest with in_features % (16 x tiles) == 0


def int8_matmul(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``x @ (qweight * scales[:, None]).T``: x (..., in), qweight (out, in) int8 -> (..., out).

    One row times a large CPU matrix (a tied LM head) goes through zoo's own row kernel, which
    streams it faster than the aten kernel (and keeps x's leading dims: a decode step's layer
    reshapes nothing), and a prompt's rows through zoo's widened tiles and a GEMM in their
    dtype (zoo/quant/int8_rows.py)."""
    if int8_rows.applies(x, qweight):
        return int8_rows.int8_rows(qweight, scales, x)  # (..., out)
    rows = x.reshape(-1, x.shape[-1])  # (M, in)
    if int8_rows.tiles_apply(rows, qweight):  # a prompt's rows; in float32 where x's dtype has no fast GEMM here
        tiled = rows.float() if widened.widens(rows) else rows  # (M, in)
        out = int8_rows.int8_tiles(tiled, qweight, scales).to(x.dtype)  # (M, out), rounded once (widened.py)
    elif x.device.type == "cpu" and (x.dtype == torch.float32 or x.shape[-1] % ATEN_INT8_INPUTS == 0):
        # aten's kernel takes rows contiguous in their last dim: Mamba's x_proj reads a transposed convolution output
        out = torch.ops.aten._weight_int8pack_mm(rows.contiguous(), qweight, scales.to(x.dtype))  # (M, out)
    else:
        out = F.linear(rows, qweight.to(x.dtype)) * scales.to(x.dtype)  # (M, out)
    return out.view(*x.shape[:-1], out.shape[-1])  # (..., out)


def int4_pack(values: torch.Tensor) -> torch.Tensor:
    """Values (out, in) int32 in 0..15 -> tinygemm's packed layout on CUDA (the CPU has zoo's
    own layout and kernel: zoo/quant/int4_cpu.py)."""
    if values.device.type != "cuda":
        raise BenchError(f"weights_dtype: int4 on {values.device.type} is not supported; allowed devices: cpu, cuda")
    pairs = values.to(torch.uint8)  # (out, in)
    nibbles = (pairs[:, ::2] << 4 | pairs[:, 1::2]).contiguous()  # (out, in / 2) uint8, high nibble first
    in_features = values.shape[1]
    tiles = next((t for t in CUDA_INNER_K_TILES if in_features % (16 * t) == 0), None)
    if tiles is None:
        raise ValueError(f"int4 on CUDA needs in_features divisible by 32; got {in_features}")
    return torch.ops.aten._convert_weight_to_int4pack(nibbles, tiles)


def int4_matmul(x: torch.Tensor, packed: torch.Tensor, group_size: int, scale_zeros: torch.Tensor) -> torch.Tensor:
    """``x @ W.T`` on CUDA with W rebuilt per group as ``(q - 8) * scale + zero``: x (M, in) -> (M, out)."""
    if x.dtype != torch.bfloat16:  # tinygemm takes bfloat16 rows only
        out = torch.ops.aten._weight_int4pack_mm(
            x.to(torch.bfloat16), packed, group_size, scale_zeros.to(torch.bfloat16)
        )
        return out.to(x.dtype)  # (M, out)
    return torch.ops.aten._weight_int4pack_mm(x, packed, group_size, scale_zeros.to(torch.bfloat16))  # (M, out)

"""One-row int8 products on the CPU through zoo's row kernel: the tied LM head.

A decode step multiplies one row by every int8 matrix; the largest is a tied head (49152 x
576 for SmolLM2-135M, 28 MB int8), read once per token. One vectorised loop that widens the
int8 bytes, multiplies and accumulates in float32 (``int8_rows`` of
zoo/components/row_product_source.py, the float kernel's loop) streams it faster than
``aten._weight_int8pack_mm``: ``python bench/int8_rows.py --rounds 5`` on this project's AMD
EPYC (Zen 4), one bfloat16 row, median per-round time ratio aten / kernel at one thread: the
head 2.19x (14.0 against 6.5 GB/s), an 8192 x 2048 matrix 1.44x, a 2048 x 8192 one 0.98x;
a 1536 x 576 one that stays in cache 1.25x; at two threads 1.87x, 1.27x, 0.88x and 1.13x.
Below ``MIN_WEIGHT_BYTES`` the call's cost is what counts, so small matrices keep aten's.
``ZOO_INT8_ROW_KERNEL=0`` turns it off.

Accumulation is in float32, scaled per row, then rounded once to the input's dtype, as the
aten kernel does (``reference``). Inside a compiled graph it is the opaque op
``torch.ops.zoo.row_product_int8_rows``. Where the kernel cannot be built the aten kernel runs.
"""

from __future__ import annotations

import os

import torch

from zoo.components import row_product

ENV_SWITCH = "ZOO_INT8_ROW_KERNEL"
MIN_WEIGHT_BYTES = 4 << 20  # 4 MiB: beyond the L2 cache, where streaming bytes is the cost


def reference(qweight: torch.Tensor, scales: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``(qweight * scales[:, None]) @ x`` for one row ``x`` (in,), accumulated in float32, in
    ``x``'s dtype; ``qweight`` int8 (out, in), ``scales`` (out,)."""
    return ((qweight.float() @ x.float()) * scales.float()).to(x.dtype)  # (out,)


def enabled() -> bool:
    """True unless ``ZOO_INT8_ROW_KERNEL=0`` or the kernel cannot be built here."""
    return os.environ.get(ENV_SWITCH, "1") != "0" and row_product.available()


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
    """``reference`` through the kernel: x (in,) -> (out,) in ``x``'s dtype (an opaque op in a graph)."""
    return row_product.EXTENSION.op("int8_rows")(qweight, scales, x)  # (out,)

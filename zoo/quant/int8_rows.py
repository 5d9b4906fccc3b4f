"""One-row int8 products on the CPU as a kernel that inductor generates: the tied LM head.

A decode step multiplies one row by every int8 matrix; the largest is a tied head (49152 x
576 for SmolLM2-135M, 28 MB int8), read once per token. ``aten._weight_int8pack_mm``
streams a matrix that large at 2.9 GB/s on this project's Xeon (avx512_bf16, one thread,
shared machine), while ``(q.float() * x.float()).sum(-1) * scales`` compiled by inductor is
one vectorised loop reading the int8 bytes once, at 5.1 GB/s (median per-round ratio 1.71x;
8192 x 2048: 3.9 against 6.1 GB/s, 1.54x). It loses where the aten kernel is strong: a
matrix that stays in cache (1536 x 576: 11.1 against 4.4 GB/s), hence ``MIN_WEIGHT_BYTES``,
and rows longer than ``MAX_ROW_LENGTH`` (2048 x 8192: 10.9 against 4.5 GB/s), where
inductor splits the reduction (zoo/components/row_product.py measured the same for
floats). At two threads (a shared 2-core machine: noisy) it lost on every shape (0.46-0.57x:
the head 1.1 against 2.0 GB/s), so it runs at one thread only. ``ZOO_INT8_ROW_KERNEL=0``
turns it off. Script: ``python bench/int8_rows.py``.

Accumulation is in float32, scaled per row, then rounded once to the input's dtype, as the
aten kernel does. The kernel is compiled once per dtype with dynamic shapes (the weight goes
in flat, so every shape shares it). Inside a compiled graph (a whole compiled decode step)
it is the opaque custom op ``torch.ops.zoo.int8_rows``: traced inline, inductor would fuse
it with its neighbours into slower kernels (zoo/components/row_product.py measured that).
If compiling fails (no C++ compiler, say), the failure is logged once and the aten kernel
is used from then on.
"""

from __future__ import annotations

import logging
import os
import types
from collections.abc import Callable

import torch

from zoo.components.row_product import MAX_ROW_LENGTH

log = logging.getLogger(__name__)

ENV_SWITCH = "ZOO_INT8_ROW_KERNEL"
MIN_WEIGHT_BYTES = 4 << 20  # 4 MiB: beyond the L2 cache, where streaming bytes is the cost
DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_kernels: dict[torch.dtype, Callable[..., torch.Tensor]] = {}
_failed: str | None = None  # why compiling failed, once it has


def int8_rows(qweight: torch.Tensor, scales: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``(qweight * scales[:, None]) @ x`` for one row ``x`` (in,), accumulated in float32, in
    ``x``'s dtype; ``qweight`` int8 (out, in) or flat (out * in,), ``scales`` (out,)."""
    rows = qweight.view(-1, x.shape[0])  # (out, in)
    return ((rows.float() * x.float()).sum(-1) * scales.float()).to(x.dtype)  # (out,)


def enabled() -> bool:
    """True unless ``ZOO_INT8_ROW_KERNEL=0`` or the kernel failed to compile."""
    return _failed is None and os.environ.get(ENV_SWITCH, "1") != "0"


def applies(x: torch.Tensor, qweight: torch.Tensor) -> bool:
    """True when ``x`` is one row on the CPU in a float dtype, outside autograd, and the
    int8 weight is large and has rows no longer than ``MAX_ROW_LENGTH``."""
    return (
        enabled()
        and x.device.type == "cpu"
        and x.dtype in DTYPES
        and qweight.dim() == 2
        and qweight.is_contiguous()
        and qweight.shape[1] == x.shape[-1] == x.numel() <= MAX_ROW_LENGTH
        and qweight.numel() >= MIN_WEIGHT_BYTES
        and not torch.is_grad_enabled()
    )


def compiled_int8_rows(qweight: torch.Tensor, scales: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``int8_rows`` through the inductor kernel (x (in,) -> (out,)) at one thread, else (or if
    it cannot be compiled) the aten kernel: at two threads on the shared 2-core machine the
    kernel ran at 0.46-0.57x aten's speed (module doc)."""
    global _failed
    if _failed is None and torch.get_num_threads() == 1:
        try:
            return _kernel(x.dtype)(qweight.view(-1), scales, x)  # weight flat: (out * in,)
        except Exception as error:  # a speed-up, never a reason to fail: any compile error falls back
            _failed = f"{type(error).__name__}: {error}".splitlines()[0]
            log.warning("zoo: the CPU int8 row kernel could not be compiled (%s); using aten's", _failed)
    return torch.ops.aten._weight_int8pack_mm(x[None], qweight, scales.to(x.dtype))[0]  # (out,)


def _kernel(dtype: torch.dtype) -> Callable[..., torch.Tensor]:
    """The compiled kernel for one dtype, each with its own copy of ``int8_rows``' code object
    (dynamo keeps compiled variants per code object, up to ``recompile_limit``)."""
    if dtype not in _kernels:
        name = f"int8_rows_{str(dtype).removeprefix('torch.')}"
        code = int8_rows.__code__.replace(co_name=name, co_qualname=name)
        copy = types.FunctionType(code, int8_rows.__globals__, name)
        _kernels[dtype] = torch.compile(copy, dynamic=True, fullgraph=True)
    return _kernels[dtype]


@torch.library.custom_op("zoo::int8_rows", mutates_args=())
def int8_rows_op(qweight: torch.Tensor, scales: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``compiled_int8_rows`` as one opaque op for graphs that ``torch.compile`` traces."""
    return compiled_int8_rows(qweight, scales, x)


@int8_rows_op.register_fake
def _int8_rows_shape(qweight: torch.Tensor, scales: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(qweight.shape[0])  # (out,)

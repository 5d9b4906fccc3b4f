"""One-row matrix products on the CPU as a fused matrix-vector kernel that inductor generates.

At batch 1 a decode step is a chain of matrix-vector products, so its speed is how fast the
weights stream through the core. The product written as ``(weight.float() * x.float()).sum(-1)``
and compiled by inductor becomes one vectorised loop that widens, multiplies and accumulates
in registers. Whether that beats torch's own ``torch.mv`` depends on the CPU, so it is chosen by
measurement: the host probe (``zoo.analysis.host_probe``, once per machine) times both on a
decode-shaped weight per dtype, and a ``zoo bench``/``compare`` run on the CPU takes the kernel
for the dtypes it was faster in (``measured_faster``). ``ZOO_ROW_KERNEL=1`` forces it on and
``0`` off; elsewhere (no run, no probe) the one-row paths are ``torch.mv`` in float32 and
``F.linear`` in half precision (``zoo/components/linear.py``, measured there). Measured earlier:

- AMD EPYC (Zen 4, avx512_bf16), 151936 x 1024 LM head, one thread: torch's paths streamed
  float32 at ~15 GB/s and bfloat16 at 5-8 GB/s, the kernel ~24 and ~20 GB/s.
- Intel Xeon (Sapphire Rapids, avx512_bf16 + AMX), the same shape, one thread, quiet machine:
  ``torch.mv`` 15.4 (float32) and 13.2 GB/s (bfloat16), the kernel 14.1 and 11.6, ``F.linear``
  15.3 and 9.3; on 3072 x 1024 layer weights ``torch.mv`` 27.1 and 19.9, the kernel 21.3 and
  14.0. At two threads ``torch.mv`` led by the same margins.

Accumulation is in float32 and the result is rounded once to the input's dtype, as
``F.linear`` does.

The kernel is compiled once per process with dynamic shapes (every weight shape shares it;
dynamo recompiles only for a new dtype, a bias/no-bias call or a new thread count, which
inductor bakes into the OpenMP pragma) and inductor's on-disk cache makes later processes
start quickly. Rows longer than ``MAX_ROW_LENGTH`` skip it (see there), and so do small
weights: below ``MIN_WEIGHT_BYTES`` a compiled call costs more than the product saves. If
compiling fails (no C++ compiler, say), the failure is logged once and ``F.linear`` is used
from then on.

Inside a compiled graph (``torch.compile`` of a whole decode step) the kernel is the opaque
custom op ``torch.ops.zoo.row_product``. Traced inline instead, the expression is fused with
its neighbours into kernels that decoded 30 tokens/s against the opaque op's 48 (bfloat16,
qwen3-0.6b's widths, 2 layers, one thread).
"""

from __future__ import annotations

import contextlib
import logging
import os
import types
from collections.abc import Callable, Iterable, Iterator

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

ENV_SWITCH = "ZOO_ROW_KERNEL"
MIN_WEIGHT_BYTES = 1 << 20  # 1 MiB: a 512 x 512 float32 weight; smaller ones are latency, not bandwidth
# Longer rows make inductor compile a split reduction (its guard: 2 <= in <= 4096) that streams
# at half the speed (a 2048 x 8192 float32 down-projection: 11.5 GB/s against torch.mv's 22).
MAX_ROW_LENGTH = 4096
DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_kernels: dict[tuple[torch.dtype, bool], Callable[..., torch.Tensor]] = {}
_failed: str | None = None  # why compiling failed, once it has
_faster: frozenset[torch.dtype] = frozenset()  # dtypes the host probe measured the kernel faster in


def row_product(weight: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``weight @ x (+ bias)`` for one row ``x`` (in,), accumulated in float32, in ``x``'s dtype.

    ``weight`` is (out, in) or flattened to (out * in,): the compiled kernel takes it flat,
    because dynamo holds a parameter's shape static and would compile once per layer shape.
    """
    rows = weight.view(-1, x.shape[0])  # (out, in)
    out = (rows.float() * x.float()).sum(-1)  # (out, in) * (in,) -> (out,)
    if bias is not None:
        out = out + bias.float()  # (out,)
    return out.to(x.dtype)  # (out,)


def enabled(dtype: torch.dtype) -> bool:
    """Whether one-row products in ``dtype`` take the kernel: ``ZOO_ROW_KERNEL`` decides where it
    is 1 or 0, else whether the run measured it faster here (``measured_faster``); never once it
    failed to compile."""
    switch = os.environ.get(ENV_SWITCH)
    if _failed is not None:
        return False
    return switch == "1" if switch in ("0", "1") else dtype in _faster


@contextlib.contextmanager
def measured_faster(dtypes: Iterable[torch.dtype]) -> Iterator[None]:
    """Take the kernel for ``dtypes`` (those the host probe measured it faster in) while the
    block runs: a harness run on the CPU wraps its phases in it."""
    global _faster
    previous, _faster = _faster, frozenset(dtypes)
    try:
        yield
    finally:
        _faster = previous


def compile_failure() -> str | None:
    """Why the kernel could not be compiled in this process, or None."""
    return _failed


def applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """True when ``x`` is one row that fits ``weight``, on the CPU, outside autograd, and the weight is large."""
    return (
        x.device.type == "cpu"
        and x.dtype in DTYPES
        and weight.dtype == x.dtype
        and weight.dim() == 2
        and weight.is_contiguous()
        and weight.shape[1] == x.shape[-1] == x.numel() <= MAX_ROW_LENGTH
        and weight.numel() * weight.element_size() >= MIN_WEIGHT_BYTES
        and not torch.is_grad_enabled()
    )


def compiled_row_product(weight: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``row_product`` through the inductor kernel, or ``F.linear`` if that cannot be compiled."""
    global _failed
    if _failed is None:
        try:
            flat_bias = None if bias is None else bias.view(-1)  # a view, not the parameter: its shape stays dynamic
            return _kernel(x.dtype, bias is not None)(weight.view(-1), x, flat_bias)  # weight flat: (out * in,)
        except Exception as error:  # a speed-up, never a reason to fail: any compile error falls back
            _failed = f"{type(error).__name__}: {error}".splitlines()[0]
            log.warning("zoo: the CPU row-product kernel could not be compiled (%s); using F.linear", _failed)
    return F.linear(x, weight, bias)


def _kernel(dtype: torch.dtype, has_bias: bool) -> Callable[..., torch.Tensor]:
    """The compiled kernel for one dtype and bias choice.

    Each gets its own copy of ``row_product``'s code object: dynamo keeps its compiled
    variants per code object and gives up (silently running the slow eager expression) after
    ``recompile_limit`` of them, so dtypes x bias x thread counts must not share one list.
    """
    key = (dtype, has_bias)
    if key not in _kernels:
        name = f"row_product_{str(dtype).removeprefix('torch.')}{'_bias' if has_bias else ''}"
        code = row_product.__code__.replace(co_name=name, co_qualname=name)
        copy = types.FunctionType(code, row_product.__globals__, name)
        _kernels[key] = torch.compile(copy, dynamic=True, fullgraph=True)
    return _kernels[key]


@torch.library.custom_op("zoo::row_product", mutates_args=())
def row_product_op(weight: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``compiled_row_product`` as one opaque op for graphs that ``torch.compile`` traces."""
    return compiled_row_product(weight, x, bias)


@row_product_op.register_fake
def _row_product_shape(weight: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty(weight.shape[0])  # (out,)

"""A Linear layer whose one-row float32 CPU product runs as a matrix-vector product.

At batch 1 a decode step is a chain of one-row products and its speed is how fast weights
stream through the core. Which torch call streams fastest depends on the dtype, so the
one-row CPU path is chosen per dtype (``MATRIX_VECTOR_DTYPES``), by measurement:

- float32: ``torch.mv`` and ``F.linear`` tie (median per-round ratio 1.00; 0.86-1.06 over
  qwen3-0.6b's and llama-3.2-1b's projections under load, 0.95-1.02 at ~26 GB/s on a
  quieter machine); ``torch.mv`` is kept.
- bfloat16: ``F.linear`` streams 2.2-3.6x faster than ``torch.mv`` under load (4-7 against
  1.3-2.4 GB/s) and 1.7-4.0x on a quieter machine (6-13 against 2.4-4.7 GB/s); float16
  1.8-3.7x. So half-precision one-row products are plain ``F.linear``.

Measured on an Intel Xeon (avx512_bf16, torch 2.13, one thread, 2 cores shared with other
jobs) with ``python bench/linear_rows.py`` (7 rounds; the quieter rerun ``--rounds 5``;
float16 ``--dtypes float16 --threads 1 --rounds 5``): interleaved rounds in one process,
so read the ratios. The absolute GB/s move with the machine's load, and two-thread figures
on the shared cores were noise (0.1-18 GB/s, ratios both ways). An older Xeon (Sapphire Rapids, torch 2.11) measured
``torch.mv`` ahead in bf16 (13.2 against 9.3 GB/s on a 151936 x 1024 head): rerun the bench on a new CPU or torch.

Where the host probe measured it faster (a ``zoo bench``/``compare`` run on the CPU; or forced
with ``ZOO_ROW_KERNEL=1``) one-row products go through the fused kernel of
``zoo/components/row_product.py`` instead (faster on some CPUs, slower on others: its module
doc has the measurements), which a compiled graph calls as the custom op
``torch.ops.zoo.row_product_row_product``. Everything else — several rows, other devices, compiled
graphs without the kernel (which keep the ``F.linear`` their backend lowers) — is plain
``F.linear``, except half-precision products of several rows on a CPU without a native
half-precision GEMM, which run widened to float32 (``zoo/components/widened.py``), and several
rows in a dtype whose oneDNN linear the host probe measured faster (``zoo/components/onednn.py``). Parameter
names and shapes are nn.Linear's, so checkpoints map unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from zoo.components import onednn, widened
from zoo.components import row_product as rows


def uses_row_kernel(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """True when ``x @ weight.T`` is a one-row CPU product the opt-in fused kernel takes."""
    return rows.applies(x, weight)


def _one_row(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """The row kernel's product of one row x (..., in) -> (..., out), or None where it does not
    take it. Eager, the kernel's C++ checks the tensors (``row_product.eager_row_product``); in a
    graph being compiled, where checks run once while tracing, Python does (``uses_row_kernel``)
    and the product is the opaque op."""
    if torch.compiler.is_compiling():
        return rows.row_product(weight, x, bias) if uses_row_kernel(x, weight) else None
    return rows.eager_row_product(weight, x, bias)


# dtypes whose one-row CPU product is torch.mv (module doc: measured per dtype)
MATRIX_VECTOR_DTYPES = (torch.float32,)


def uses_matrix_vector(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """True when ``x`` is one row on the CPU in the weight's dtype, that dtype is one of
    ``MATRIX_VECTOR_DTYPES``, outside compilation."""
    return (
        x.device.type == "cpu"
        and x.dtype == weight.dtype
        and x.dtype in MATRIX_VECTOR_DTYPES
        and weight.dim() == 2
        and x.numel() == x.shape[-1] == weight.shape[1]
        and not torch.compiler.is_compiling()
    )


StepTensors = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]  # weight, scales, bias


class RowStackable:
    """A projection layer whose instances reading one input stack by output rows into one layer
    of the same kind (``zoo.fuse_projections``): every tensor it holds has its output rows on
    dimension 0, so the stack's tensors are the parts' concatenated, and its output is theirs
    side by side."""

    @classmethod
    def stack_rows(cls, parts: Sequence[nn.Module]) -> nn.Module | None:
        """One layer computing ``parts``' outputs side by side, or None where they cannot be
        stacked (another class, input width, dtype, device, bias choice or layout)."""
        raise NotImplementedError

    def step_tensors(self) -> StepTensors | None:
        """This projection as an eager decode step's one-call layer steps take it
        (``cpu_layer_steps_source.py``): (weight, None, bias) for float rows on the row kernel,
        (int8 rows, scales, bias) for int8 ones; None (the default) where its product is its
        own, so the step declines and the layer runs its forward. A subclass whose forward
        computes something else returns None. The layer's kernel choice and size floor are
        decided here; shapes, dtypes and layouts in C++."""
        return None

    def kernel_rows(self) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """This projection's rows as a fused kernel reads them inside its own loop (Mamba's
        x_proj in its one-token step), whatever the products' kernel choice: (float weight,
        None), (int8 rows, a scale a row) or (int4 panels, their scales and offsets); None (the
        default) for another layout or a layer with a bias, which such kernels do not add."""
        return None


def step_tensors(*layers: nn.Module | None) -> list[StepTensors] | None:
    """Each layer's ``RowStackable.step_tensors``, in order, or None where one is not a
    ``RowStackable`` or makes its product its own: a one-call step takes all or none."""
    tensors = []
    for layer in layers:
        given = layer.step_tensors() if isinstance(layer, RowStackable) else None
        if given is None:
            return None
        tensors.append(given)
    return tensors


class Linear(nn.Linear, RowStackable):
    """nn.Linear with one-row float32 CPU products as ``torch.mv`` or the opt-in kernel (module doc)."""

    @classmethod
    def stack_rows(cls, parts: Sequence[nn.Module]) -> Linear | None:
        first = parts[0]
        if not all(
            type(p) is cls
            and isinstance(p, nn.Linear)
            and p.in_features == first.in_features
            and p.weight.dtype == first.weight.dtype
            and p.weight.device == first.weight.device
            and p.weight.device.type != "meta"
            and (p.bias is None) == (first.bias is None)
            for p in parts
        ):
            return None
        assert isinstance(first, Linear)
        joint = cls(
            first.in_features,
            sum(int(p.out_features) for p in parts),  # type: ignore[misc]
            bias=first.bias is not None,
            device=first.weight.device,
            dtype=first.weight.dtype,
        )
        with torch.no_grad():
            joint.weight.copy_(torch.cat([p.weight for p in parts], dim=0))  # type: ignore[misc]  # (sum out, in)
            if joint.bias is not None:
                joint.bias.copy_(torch.cat([p.bias for p in parts], dim=0))  # type: ignore[misc]  # (sum out,)
        joint.weight.requires_grad_(first.weight.requires_grad)
        if joint.bias is not None:
            joint.bias.requires_grad_(first.weight.requires_grad)
        return joint

    def step_tensors(self) -> StepTensors | None:
        """(weight, None, bias) where the row kernel takes this weight's one-row products (the
        run's choice in its dtype, ``row_product.MIN_WEIGHT_BYTES`` and up); read from nn.Module's
        dicts, as a decode step's layers ask this of every projection (``__getattr__``: ~1 µs a
        read on a 2-core Xeon)."""
        params = self._parameters
        weight = params["weight"]
        if weight is None or weight.numel() * weight.element_size() < rows.MIN_WEIGHT_BYTES:
            return None
        return (weight, None, params["bias"]) if rows.enabled(weight.dtype) else None

    def kernel_rows(self) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        params = self._parameters
        return None if params["bias"] is not None else (params["weight"], None)  # type: ignore[return-value]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias  # once: each `self.` read is an nn.Module.__getattr__ call
        if x.device.type != "cpu":  # first: off the CPU a call pays for no CPU-path checks
            return F.linear(x, weight, bias)
        if x.numel() == x.shape[-1] and (out := _one_row(x, weight, bias)) is not None:
            return out  # (..., out)
        if uses_matrix_vector(x, weight):
            out = torch.mv(weight, x.reshape(-1))  # (out,)
            if bias is not None:
                out = out + bias
            return out.view(*x.shape[:-1], out.shape[0])  # (..., out)
        if widened.widens(x) and weight.dtype == x.dtype and x.numel() > x.shape[-1]:
            return widened.linear(x, weight, bias)  # several rows, no native half-precision GEMM here
        if onednn.takes(x, weight):
            return onednn.linear(x, weight, bias)  # several rows, oneDNN measured faster here
        return F.linear(x, weight, bias)

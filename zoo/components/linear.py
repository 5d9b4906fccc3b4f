"""A Linear layer whose one-row CPU product runs as a matrix-vector product.

At batch 1 a decode step is a chain of one-row products and its speed is how fast weights
stream through the core. On the CPU, ``F.linear`` of one row goes through a GEMM path that
streams no faster than ``torch.mv`` in float32 and well slower in bfloat16 (a Xeon with
avx512_bf16 and AMX, one thread: 9.3 against 13.2 GB/s on a 151936 x 1024 LM head, 13.5
against 19.9 on a 3072 x 1024 layer weight), so eager one-row CPU products are ``torch.mv``.
With ``ZOO_ROW_KERNEL=1`` they go through the fused kernel of
``zoo/components/row_product.py`` instead (faster on some CPUs, slower on others: its module
doc has the measurements), which a compiled graph calls as the custom op
``torch.ops.zoo.row_product``. Everything else — several rows, other devices, compiled
graphs without the kernel (which keep the ``F.linear`` their backend lowers) — is plain
``F.linear``. Parameter names and shapes are nn.Linear's, so checkpoints map unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.components import row_product as rows


def uses_row_kernel(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """True when ``x @ weight.T`` is a one-row CPU product the opt-in fused kernel takes."""
    return rows.enabled() and rows.applies(x, weight)


def uses_matrix_vector(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """True when ``x`` is one row on the CPU in the weight's dtype, outside compilation."""
    return (
        x.device.type == "cpu"
        and x.dtype == weight.dtype
        and weight.dim() == 2
        and x.numel() == x.shape[-1] == weight.shape[1]
        and not torch.compiler.is_compiling()
    )


class Linear(nn.Linear):
    """nn.Linear with one-row CPU products as ``torch.mv`` or the opt-in kernel (module doc)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if uses_row_kernel(x, self.weight):
            row = x.reshape(-1)  # (in,)
            if torch.compiler.is_compiling():
                out = rows.row_product_op(self.weight, row, self.bias)  # (out,), opaque in the caller's graph
            else:
                out = rows.compiled_row_product(self.weight, row, self.bias)  # (out,)
        elif uses_matrix_vector(x, self.weight):
            out = torch.mv(self.weight, x.reshape(-1))  # (out,)
            if self.bias is not None:
                out = out + self.bias
        else:
            return F.linear(x, self.weight, self.bias)
        return out.view(*x.shape[:-1], out.shape[0])  # (..., out)

"""A Linear layer whose one-row CPU product runs as a fused matrix-vector kernel.

At batch 1 a decode step is a chain of one-row products and its speed is how fast weights
stream through the core; torch's ``F.linear`` of one row on the CPU streams well below that
(``zoo/components/row_product.py`` has the measurements and the kernel). Eager calls go
through the compiled kernel, and a compiled graph calls it as the custom op
``torch.ops.zoo.row_product``. Everything else — several rows, small weights, autograd,
other devices — is plain ``F.linear``. Parameter names and shapes are nn.Linear's, so
checkpoints map unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.components import row_product as rows


def uses_row_kernel(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """True when ``x @ weight.T`` is a one-row CPU product that the fused kernel takes."""
    return rows.enabled() and rows.applies(x, weight)


class Linear(nn.Linear):
    """nn.Linear with one-row CPU products through the fused kernel (see the module doc)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not uses_row_kernel(x, self.weight):
            return F.linear(x, self.weight, self.bias)
        row = x.reshape(-1)  # (in,)
        if torch.compiler.is_compiling():
            out = rows.row_product_op(self.weight, row, self.bias)  # (out,), opaque in the caller's graph
        else:
            out = rows.compiled_row_product(self.weight, row, self.bias)  # (out,)
        return out.view(*x.shape[:-1], out.shape[0])  # (..., out)

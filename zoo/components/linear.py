"""A Linear layer whose one-row bfloat16 product on the CPU runs as a matrix-vector product.

At batch 1 a decode step is a chain of matrix-vector products, and on the CPU torch's
bfloat16 ``F.linear`` of one row goes through a GEMM path that streams the weights at about
half the speed ``torch.mv`` does (measured on a Xeon with avx512_bf16 and AMX: ~6 GB/s
against ~10 GB/s, one thread; bench/vs_transformers.py). Decode is memory-bound, so this is
most of a bf16 decode step. Everything else — float32, several rows, other devices, and
compiled graphs (which keep the one ``F.linear`` their backend lowers) — is plain
``F.linear``. Parameter names and shapes are nn.Linear's, so checkpoints map unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def uses_matrix_vector(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """True when ``x`` is one row of bfloat16 on the CPU, outside compilation."""
    return (
        x.dtype == torch.bfloat16
        and weight.dtype == torch.bfloat16
        and x.device.type == "cpu"
        and x.numel() == x.shape[-1]
        and not torch.compiler.is_compiling()
    )


class Linear(nn.Linear):
    """nn.Linear with the one-row bfloat16 CPU product as ``torch.mv`` (see the module doc)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if uses_matrix_vector(x, self.weight):
            out = torch.mv(self.weight, x.reshape(-1))  # (out,)
            if self.bias is not None:
                out = out + self.bias
            return out.view(*x.shape[:-1], out.shape[0])  # (..., out)
        return F.linear(x, self.weight, self.bias)

"""When torch's grouped matmul can run a mixture of experts, and the group boundaries it needs.

``torch._grouped_mm(a (M, K), b (G, K, N), offs (G,))`` multiplies row group g of ``a``
(rows ``offs[g-1]:offs[g]``) by ``b[g]`` in one call, with the boundaries on the device.
Where it runs (torch 2.13, checked by hand and in tests/components/test_grouped_mm.py):
- CPU, eager: float32, bfloat16 and float16.
- CPU or CUDA under torch.compile: bfloat16 only (its meta function refuses other dtypes).
- Rows of every operand a multiple of 16 bytes (d_model and the expert width).
- CUDA, eager: bfloat16 on sm90 and newer (the CUTLASS kernels); other GPUs and dtypes keep
  the older paths.
"""

from __future__ import annotations

import torch


def grouped_mm_supported(x: torch.Tensor, *widths: int) -> bool:
    """Whether the grouped path can run on ``x``'s device and dtype, in this mode.

    ``widths``: the inner sizes of the matrices involved (d_model, expert hidden); the
    kernels need every row stride to be a multiple of 16 bytes.
    """
    if not hasattr(torch, "_grouped_mm"):
        return False
    if any(width * x.element_size() % 16 for width in (x.shape[-1], *widths)):
        return False
    if torch.compiler.is_compiling() or x.device.type == "cuda":
        if x.dtype != torch.bfloat16:
            return False
    if x.device.type == "cuda":
        return torch.cuda.get_device_capability(x.device) >= (9, 0)
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16, torch.float16)


def expert_offsets(flat_index: torch.Tensor, n_experts: int) -> torch.Tensor:
    """End row (E,) int32 of each expert's group once pairs are sorted by expert.

    Counted by comparison with every expert id rather than ``bincount``, whose output size
    depends on the values (a graph break under torch.compile).
    """
    experts = torch.arange(n_experts, device=flat_index.device)  # (E,)
    counts = (flat_index[:, None] == experts[None, :]).sum(dim=0)  # (E,)
    return torch.cumsum(counts, dim=0).to(torch.int32)

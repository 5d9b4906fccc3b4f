"""Which SDPA kernels an attention call whose shapes change every call may use.

On Hopper, torch's first choice for ``scaled_dot_product_attention`` is cuDNN's attention,
which builds an execution plan on the host for every new shape. An eager decode step attends
over the cache slots filled so far — one more each step — so every step is a new shape, and
every layer pays the build. Measured on an H100 (torch 2.11, llama-3.2-1b, bfloat16, batch 1,
eager decode): ``aten::_cudnn_attention_forward`` took 3.3-3.9 ms of CPU per call against
5 us of GPU time, 75% of the step, and decode ran at 42-71 tok/s in an order unrelated to the
attention variant. Flash attention (which takes grouped K/V heads without repeating them),
memory-efficient attention and the math kernel build no plan, so calls of varying shape go to
them. Static-shape calls (prefill without a cache, a compiled decode step) keep torch's
default choice: there a plan is built once and reused.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

PLAN_FREE_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def varying_shape_kernels(device: torch.device) -> ContextManager[None]:
    """Context for an SDPA call whose key length differs from the previous call's.

    On CUDA it leaves out cuDNN (see the module doc); elsewhere it changes nothing.
    """
    if device.type != "cuda":
        return contextlib.nullcontext()
    return sdpa_kernel(PLAN_FREE_BACKENDS)

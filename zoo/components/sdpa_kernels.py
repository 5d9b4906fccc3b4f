"""Which SDPA kernels an attention call whose shapes change every call may use.

On Hopper, torch's first choice for ``scaled_dot_product_attention`` is cuDNN's attention,
which builds an execution plan on the host for every shape (and stride) it has not seen
before. An eager decode step attends over the cache slots filled so far, one more each
step, and each new cache size gives new strides, so a generation meets new shapes all the
time and every layer pays the build: 3.3-3.9 ms of CPU per call on an H100 (torch 2.11)
against 5 us of GPU time. Paired A/B on an H100, bfloat16, batch 1, prompt 128, 32 decode
steps, a new cache size each round as each ``zoo.generate`` call makes: torch's choice took
4.65x (decode) and 5.0x (prefill) the time of this one on llama-3.2-1b, 2.6x and 3.2x on
qwen3-0.6b; with every shape already planned the two tied (0.93-1.09x). Flash attention
(which takes grouped K/V heads without repeating them), memory-efficient attention and the
math kernel build no plan, so calls of varying shape go to them. Static-shape calls
(prefill without a cache, a compiled decode step) keep torch's default choice: there a
plan is built once and reused.
"""

from __future__ import annotations

import contextlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

PLAN_FREE_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def varying_shape_kernels(device: torch.device) -> contextlib.AbstractContextManager[None]:
    """Context for an SDPA call whose key length differs from the previous call's.

    On CUDA it leaves out cuDNN (see the module doc); elsewhere it changes nothing.
    """
    if device.type != "cuda":
        return contextlib.nullcontext()
    return sdpa_kernel(PLAN_FREE_BACKENDS)

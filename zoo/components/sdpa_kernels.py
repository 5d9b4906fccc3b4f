"""Which kernel an attention call takes: ``sdpa`` (zoo's CPU kernel for one query, torch's
otherwise), and on CUDA which of torch's an attention call whose shapes change every call
may use.

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

``in_dtype`` puts keys and values in the queries' (or the cache's) dtype without an operator
call where they already are in it: ``.to`` to a tensor's own dtype launches nothing but is
still a dispatched call, which an eager GPU decode step paid four times a layer; on an H200
VM's host such a step is bound by the host (its kernels 1.6 of 16 ms, a view's dispatch
1.7-3.5 µs there: results/README.md).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from zoo.components import cpu_attention

PLAN_FREE_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def varying_shape_kernels(device: torch.device) -> contextlib.AbstractContextManager[None]:
    """Context for an SDPA call whose key length differs from the previous call's.

    On CUDA it leaves out cuDNN (see the module doc); elsewhere it changes nothing.
    """
    if device.type != "cuda":
        return contextlib.nullcontext()
    return sdpa_kernel(PLAN_FREE_BACKENDS)


HALF_DTYPES = (torch.bfloat16, torch.float16)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **options: Any) -> torch.Tensor:
    """``F.scaled_dot_product_attention``; one query on the CPU through zoo's kernel
    (``cpu_attention``) where it applies. Otherwise one half-precision query on the CPU is
    computed in float32 and rounded back: torch's CPU kernel took 4.0x (160 keys), 5.6x (1024)
    and 2.9x (4096) as long in bfloat16 as the float32 one with the casts included (one
    thread, 9 query and 3 key/value heads of 64, this project's Zen 4), and float32 is the
    more accurate of the two (its error against float32 inputs: 1.8e-3 against 2.1e-3 at 160 keys)."""
    if cpu_attention.applies(q, k, v, options):
        return cpu_attention.one_query_attention(q, k, v, options)  # (B, H, 1, D)
    if q.shape[2] != 1 or q.device.type != "cpu" or q.dtype not in HALF_DTYPES:
        return F.scaled_dot_product_attention(q, k, v, **options)
    mask = options.get("attn_mask")
    if mask is not None and mask.is_floating_point():
        options["attn_mask"] = mask.float()
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), **options).to(q.dtype)  # (B, H, 1, D)


def in_dtype(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` in ``dtype``, itself where it already is (module doc)."""
    return t if t.dtype == dtype else t.to(dtype)

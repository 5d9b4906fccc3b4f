"""Host memory the process holds: freed heap pages handed back, weights re-homed.

**Freed pages.**
glibc keeps freed heap memory for reuse, and work that makes many short-lived buffers between
long-lived ones leaves it fragmented and resident: loading a packed GGUF (each matrix's 4-bit
values, int32 for packing, a slice of floats to re-quantize), stacking projections
(``zoo.fuse_projections`` unpacks and repacks every quantized part), compiling a step
(inductor's graphs, code and caches). Measured on a 95 MB packed SmolLM2-135M: ~430 MB
resident after loading without it, ~200 MB with it (the runtime's imports included);
fusing its projections left 113 MB more resident, 0.6 MB once returned; the first compiled
decode step 70 MB.
"""

from __future__ import annotations

import ctypes
import sys

import torch
from torch import nn


def return_freed_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl names its libc otherwise)
        return
    libc.malloc_trim(0)


def freed_after(result: torch.Tensor) -> torch.Tensor:
    """``result``, once the heap's free pages went back (``return_freed_memory``): for a call
    that compiled a graph."""
    return_freed_memory()
    return result


def rehome(model: nn.Module) -> None:
    """Copy every weight of a freshly initialised (or quantized) CPU model once, into memory
    allocated now.

    Measured, not explained: on this project's 2-core EPYC (a VM) the weights as initialised
    streamed 7-20% slower through a decode step than a copy of them (interleaved rounds in one
    process, the same model swapping between the two: gpt2 4 layers float32 19.2 against
    16.0 ms a token, mamba-130m 12.7 / 11.3, qwen3-0.6b 45.1 / 42.2); where the first copy's
    pages land, not the code, decides it. Whole ``zoo bench --arch gpt2 --set n_layers=4
    --threads 1`` processes alternated six times: decode 59.7 against 54.3 tokens/s (medians;
    5 of 6 pairs faster). ``zoo.quant.quantize`` does it for the packed weights it makes:
    an int8 qwen3-0.6b (4 layers) decoded 17.5 against 15.5 ms a token in one process, while
    whole ``zoo bench`` processes of the full int8 model differed within their noise (23.6 /
    22.4 and 22.2 / 23.3 tokens/s, with / without). One copy of each tensor at a time: the
    cost is a memcpy of the model, next to its random initialisation's minutes at scale."""
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:  # each shared (tied) tensor once
            if tensor.device.type == "cpu":
                tensor.data = tensor.data.clone()

"""Host memory the process holds: freed heap pages handed back, weights re-homed in huge pages.

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
import functools
import mmap
import sys

import torch
from torch import nn


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """Linux's glibc, or None (another system, or musl, which names its libc otherwise)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def return_freed_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def freed_after(result: torch.Tensor) -> torch.Tensor:
    """``result``, once the heap's free pages went back (``return_freed_memory``): for a call
    that compiled a graph."""
    return_freed_memory()
    return result


ARENA_BYTES = 64 << 20  # weights copied into arenas of 64 MiB: a dropped tensor's memory returns with its arena's
HUGE_PAGE = 2 << 20  # x86-64's transparent huge page
ALIGN = 64  # each tensor on its own cache line
MADV_HUGEPAGE = 14  # linux/mman.h


def rehome(model: nn.Module, keep_values: bool = True) -> None:
    """Copy every weight of a CPU model once into arenas allocated now, in huge pages where
    the system gives them (Linux's transparent huge pages, asked for with ``madvise``).

    Measured, not explained, first: on this project's 2-core EPYC (a VM) the weights as
    initialised streamed 7-20% slower through a decode step than a copy of them (interleaved
    rounds in one process: gpt2 4 layers float32 19.2 against 16.0 ms a token, mamba-130m
    12.7 / 11.3, qwen3-0.6b 45.1 / 42.2). Then the arenas: a decode step streams every
    matrix once, most of them 0.5-4 MB, and with 4 KiB pages each one restarts the TLB
    walks and the prefetchers at every page; in 2 MiB pages it reads on. Twelve Qwen3-0.6B
    layers of int4 matrices through zoo's kernel (one decode row, interleaved rounds in one
    process): 13.9 GB/s as separate tensors, 15.5 copied into one arena of 4 KiB pages, 17.4
    in huge pages at one thread; 20.8 / 21.0 / 24.2 at two. Whole decode steps, arenas against
    the same model's tensors copied one by one (interleaved, one process, 24 steps, medians
    of 5): qwen3-0.6b int4 1.07x at one thread and 1.10x at two, int8 1.14x, gpt2 float32
    1.02x (its matrices are 2.4-9.4 MB). Tensors keep their shapes, dtypes
    and values; each is a view of its arena (a 64-byte aligned slice), so an arena's memory
    returns once none of its tensors is held. Called after building, loading and quantizing
    on the CPU, and after ``fuse_projections``. ``keep_values=False`` re-points the tensors
    without copying (their values undefined): for a model about to be loaded into, whose
    peak memory is then the arenas alone, not the arenas beside the weights they copy."""
    tensors = _weights(model)
    group: list[torch.Tensor] = []
    size = 0
    for tensor in tensors:
        nbytes = _aligned(tensor.numel() * tensor.element_size())
        if group and size + nbytes > ARENA_BYTES:
            _into_arena(group, size, keep_values)
            group, size = [], 0
        group.append(tensor)
        size += nbytes
    if group:
        _into_arena(group, size, keep_values)


def _weights(model: nn.Module) -> list[torch.Tensor]:
    """The model's CPU parameters and buffers with data, each shared (tied) tensor once;
    non-contiguous ones are copied alone (their strides kept)."""
    seen: set[int] = set()
    out = []
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.device.type != "cpu" or tensor.is_meta or id(tensor) in seen or tensor.numel() == 0:
                continue
            seen.add(id(tensor))
            if tensor.is_contiguous():
                out.append(tensor)
            else:
                tensor.data = tensor.data.clone()
    return out


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def _into_arena(tensors: list[torch.Tensor], size: int, keep_values: bool) -> None:
    """Copy ``tensors`` into one new arena of ``size`` bytes, each becoming a view of it."""
    arena = huge_buffer(size)
    offset = 0
    with torch.no_grad():
        for tensor in tensors:
            nbytes = tensor.numel() * tensor.element_size()
            view = arena[offset : offset + nbytes].view(tensor.dtype).view(tensor.shape)
            if keep_values:
                view.copy_(tensor.data)
            tensor.data = view
            offset += _aligned(nbytes)


def huge_buffer(size: int) -> torch.Tensor:
    """``size`` bytes (uint8, values undefined) starting on a huge page boundary, advised into
    huge pages on Linux before any page is touched (elsewhere, or refused: ordinary pages): the
    memory ``rehome`` gives weights, and the host probe the buffers it reads as weights."""
    raw = torch.empty(size + HUGE_PAGE + mmap.PAGESIZE, dtype=torch.uint8)
    start = -raw.data_ptr() % HUGE_PAGE
    buffer = raw[start : start + size]
    libc = _glibc()
    if libc is not None and size >= HUGE_PAGE:
        length = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
        libc.madvise(ctypes.c_void_p(buffer.data_ptr()), ctypes.c_size_t(length), MADV_HUGEPAGE)
    return buffer

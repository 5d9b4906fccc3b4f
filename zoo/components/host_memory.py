"""Returning the host heap's freed pages to the system after work that leaves many behind.

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


def return_freed_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl names its libc otherwise)
        return
    libc.malloc_trim(0)

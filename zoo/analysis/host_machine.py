"""The machine a measurement ran on: its CPU's model, flags and last-level cache, and the
fingerprint the host probe's figures are cached under (``host_probe``).

What decides a CPU's peaks is its model, its logical CPUs, the torch build and the thread
count; the flags that decide half-precision speed and the cache a step's weights outgrow are
read here too, from ``/proc/cpuinfo`` and sysfs on Linux (what ``platform`` says elsewhere).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

import torch


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what ``platform`` says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """The flags that decide half-precision speed (avx2, avx512f, avx512_bf16, amx_bf16, amx_tile) this CPU has."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "flags":
                present = set(value.split())
                return [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in present]
    except OSError:
        pass
    return []


def cpu_description() -> str:
    """Model name, logical CPUs and the flags that decide bf16 speed, in one line."""
    return f"{cpu_model()}, {os.cpu_count()} logical CPUs; flags: {' '.join(cpu_flags()) or 'unknown'}"


def machine() -> dict[str, Any]:
    """What the peaks depend on: CPU model, logical CPUs, torch version, torch's thread count now."""
    return {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def fingerprint(described: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:12]


def last_level_cache_bytes() -> int | None:
    """The largest CPU cache Linux reports for CPU 0 (sysfs), or None."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * unit)
    return max(sizes, default=None)

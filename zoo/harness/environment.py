"""Where a run happens: the device picked, its name, and what produced the numbers."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from pydantic import BaseModel

from zoo.components import cpu_attention
from zoo.errors import BenchError

DEVICE_KINDS = ("auto", "cuda", "mps", "cpu")


def pick_device(requested: str = "auto") -> torch.device:
    """``auto``: cuda, then mps, then cpu. An explicit device that is absent is a BenchError."""
    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(requested)
    except RuntimeError:
        raise BenchError(f"device: unknown device {requested!r}; allowed: auto, cpu, cuda, cuda:N, mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise BenchError(
                "device: cuda is not available on this machine (no CUDA device or a CPU build of torch); allowed: "
                "auto, cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise BenchError(
                f"device: {requested} does not exist; this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    elif device.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise BenchError("device: mps is not available on this machine; allowed: auto, cpu")
    elif device.type != "cpu":
        raise BenchError(f"device: {requested!r} is not supported; allowed: auto, cpu, cuda, cuda:N, mps")
    return device


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return f"Apple {platform.machine()} (mps)"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def zoo_git_commit() -> str | None:
    """The commit of the zoo checkout that ran, with ``+dirty`` for uncommitted changes."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if commit.returncode:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


class Environment(BaseModel):
    torch_version: str
    python_version: str
    device: str
    device_name: str
    dtype: str
    sdpa_backend: str
    compile_mode: str
    compile_guards: str = "none"  # compiled: "skipped once warm" or "checked" (phases/compiling.py)
    threads: int
    zoo_commit: str | None


_SDPA_PREFIX = "aten::_scaled_dot_product_"
ZOO_ONE_QUERY = "zoo one-query (cpu)"  # zoo/components/cpu_attention.py
_SDPA_NAMES = {  # the aten op each backend dispatches to, as the profiler names it
    "flash_attention_for_cpu": "flash (cpu)",
    "flash_attention": "flash",
    "efficient_attention": "memory-efficient",
    "cudnn_attention": "cudnn",
    "attention_math": "math",
    "fused_attention_overrideable": "overrideable",
}


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Point file descriptor 2 at /dev/null for a moment (C++ logging bypasses sys.stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def sdpa_backends_used(step: Callable[[], object]) -> str:
    """The SDPA kernels one call of ``step`` dispatches to, read off the profiler.

    "none" when the model attends without ``scaled_dot_product_attention`` (an explicit
    softmax, as attention sinks need); zoo's one-query CPU kernel is named beside torch's.
    """
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU])
    with _quiet_stderr():  # kineto writes a line to fd 2 as it starts and stops
        prof.start()
    try:
        step()
    finally:
        with _quiet_stderr():
            prof.stop()
    found = []
    for event in prof.key_averages():
        if event.key == cpu_attention.OP_NAME and ZOO_ONE_QUERY not in found:
            found.append(ZOO_ONE_QUERY)
        if event.key.startswith(_SDPA_PREFIX):
            kind = event.key[len(_SDPA_PREFIX) :]
            label = _SDPA_NAMES.get(kind, kind)
            if label not in found:
                found.append(label)
    return ", ".join(found) or "none"

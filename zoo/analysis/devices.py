"""Peak figures for roofline estimates: GPUs from the vendor document each row cites, the host
CPU measured (``zoo.analysis.host_probe``).

Peaks are dense (no 2:4 sparsity): vendors print the sparse figure first and the dense one
is half of it. bf16 and fp16 are the tensor-core rates with fp32 accumulation (what
PyTorch's matmuls use); fp32 is the plain CUDA-core rate (TF32 off). Bandwidth is the
memory bandwidth of the board named. The roofline is an upper bound: time per step is at
least the FLOPs over peak compute and at least the bytes over peak bandwidth
(``step_roofline``; each phase of the harness gives its FLOPs and bytes:
``zoo.harness.phases``' ``predict``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from zoo.analysis.host_probe import HostPeaks, host_peaks
from zoo.errors import BenchError, allowed, did_you_mean


@dataclass(frozen=True)
class GPUSpec:
    key: str
    name: str
    bf16_tflops: float  # dense tensor-core, fp32 accumulate
    fp16_tflops: float
    fp32_tflops: float  # non-tensor
    memory_gb_s: float
    memory_gib: float
    device_names: tuple[str, ...]  # substrings of torch.cuda.get_device_name() that mean this board
    source: str

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.memory_gb_s * 1e9


GPUS: dict[str, GPUSpec] = {
    g.key: g
    for g in (
        GPUSpec(
            "h100-sxm",
            "NVIDIA H100 SXM5 80GB",
            989.4,
            989.4,
            66.9,
            3350,
            80,
            ("H100 80GB HBM3", "H100 SXM"),
            "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet (H100 SXM: BF16 1,979 TFLOPS with sparsity, FP32 67 TFLOPS, 3.35 TB/s)",  # noqa: E501
        ),
        GPUSpec(
            "h100-pcie",
            "NVIDIA H100 PCIe 80GB",
            756.5,
            756.5,
            51.2,
            2000,
            80,
            ("H100 PCIe",),
            "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet (H100 PCIe: BF16 1,513 TFLOPS with sparsity, FP32 51 TFLOPS, 2 TB/s)",  # noqa: E501
        ),
        GPUSpec(
            "h200",
            "NVIDIA H200 SXM 141GB",
            989.4,
            989.4,
            66.9,
            4800,
            141,
            ("H200",),
            "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM: BF16 1,979 TFLOPS with sparsity, FP32 67 TFLOPS, 4.8 TB/s)",  # noqa: E501
        ),
        GPUSpec(
            "a100-80gb",
            "NVIDIA A100 SXM4 80GB",
            312.0,
            312.0,
            19.5,
            2039,
            80,
            ("A100-SXM4-80GB",),
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (A100 80GB SXM: BF16 312 TFLOPS dense, FP32 19.5, 2,039 GB/s)",  # noqa: E501
        ),
        GPUSpec(
            "l4",
            "NVIDIA L4 24GB",
            121.0,
            121.0,
            30.3,
            300,
            24,
            ("L4",),
            "https://www.nvidia.com/en-us/data-center/l4/ (L4: BF16 242 TFLOPS with sparsity, FP32 30.3 TFLOPS, 300 GB/s)",  # noqa: E501
        ),
        GPUSpec(
            "rtx-4090",
            "NVIDIA GeForce RTX 4090 24GB",
            165.2,
            165.2,
            82.6,
            1008,
            24,
            ("RTX 4090",),
            "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf (RTX 4090: FP16/BF16 tensor 165.2 TFLOPS dense with FP32 accumulate, FP32 82.6, 1,008 GB/s)",  # noqa: E501
        ),
    )
}


def gpu(key: str) -> GPUSpec:
    """The table row for ``key`` (e.g. ``h100-sxm``), or a BenchError listing the rows."""
    if key not in GPUS:
        raise BenchError(f"--predict: unknown GPU {key!r}{did_you_mean(key, GPUS)}; allowed: {allowed(GPUS)}")
    return GPUS[key]


def matches_device(spec: GPUSpec, device_name: str) -> bool:
    """Whether a measured device (torch's name for it) is this board.

    Each name part must stand as whole words: "L4" is not an L40S, and the A100 row (SXM4)
    is not "NVIDIA A100 80GB PCIe", a board with less bandwidth.
    """
    return any(
        re.search(rf"(?<![\w-]){re.escape(part)}(?![\w-])", device_name, flags=re.IGNORECASE)
        for part in spec.device_names
    )


@dataclass(frozen=True)
class DevicePeaks:
    """What a roofline divides by: peak bytes/s and matmul FLOP/s by dtype, and where they
    came from (``source``, written in the row as ``roofline_source``)."""

    source: str  # "spec sheet h100-sxm"; the probe's "measured host (<fingerprint>, N threads)"
    bandwidth: float  # bytes per second
    flops: dict[torch.dtype, float]  # FLOP/s of matmuls in each dtype
    fallback_flops: float  # any other dtype (plain fp32 rate)

    def peak_flops(self, dtype: torch.dtype) -> float:
        return self.flops.get(dtype, self.fallback_flops)


def gpu_peaks(key: str) -> DevicePeaks:
    """The peaks of a GPU of the table (``--predict`` names one)."""
    board = gpu(key)
    return DevicePeaks(
        source=f"spec sheet {key}",
        bandwidth=board.bandwidth,
        flops={torch.bfloat16: board.bf16_tflops * 1e12, torch.float16: board.fp16_tflops * 1e12},
        fallback_flops=board.fp32_tflops * 1e12,
    )


def measured_host_peaks(host: HostPeaks) -> DevicePeaks:
    """The peaks of a measured host (``zoo.analysis.host_probe``): its fastest bandwidth and the
    matmul FLOP/s of each dtype probed (float32 is the fallback for any other). A half
    precision whose products a run widens to float32 (``HostPeaks.widened_matmul_dtypes``)
    multiplies at float32's rate: what runs, not the slow native GEMM it avoids (an AVX2-only
    host's 1.2 GFLOP/s in bfloat16 had put a gpt2 decode at 1594% of its "roofline")."""
    widened = set(host.widened_matmul_dtypes)
    wide = host.matmul_flops["float32"]
    flops = {getattr(torch, name): wide if name in widened else rate for name, rate in host.matmul_flops.items()}
    threads = host.machine.get("threads")
    return DevicePeaks(
        source=f"measured host ({host.fingerprint}, {threads} thread{'s' if threads != 1 else ''})",
        bandwidth=host.bandwidth,
        flops=flops,
        fallback_flops=host.matmul_flops["float32"],
    )


def device_peaks(device: str | torch.device, device_name: str) -> DevicePeaks | None:
    """The peaks of the device a run is on, for its achieved fraction of the roofline: the
    spec sheet of a CUDA board of the table (``device_name`` as torch names it); the CPU's
    measured peaks at torch's current thread count (probed once per machine and cached);
    None for boards not in the table and for MPS."""
    kind = torch.device(device).type
    if kind == "cpu":
        return measured_host_peaks(host_peaks())
    if kind != "cuda":
        return None
    for key, board in GPUS.items():
        if matches_device(board, device_name):
            return gpu_peaks(key)
    return None


def _step_time(flops: float, nbytes: float, peak_flops: float, bandwidth: float) -> tuple[float, str]:
    compute, memory = flops / peak_flops, nbytes / bandwidth
    return (compute, "compute") if compute >= memory else (memory, "memory")


def step_roofline(
    flops: float, nbytes: float, tokens: int, peaks: DevicePeaks | None, dtype: torch.dtype
) -> dict[str, object]:
    """One phase's analytic counterpart: its FLOPs and bytes and, on ``peaks``, the time it
    takes at least (compute or memory, whichever is slower), tokens/s and the bound."""
    out: dict[str, object] = {
        "flops": int(flops),
        "bytes": int(nbytes),
        "seconds": None,
        "tokens_per_s": None,
        "bound": None,
    }
    if peaks is not None:
        seconds, bound = _step_time(flops, nbytes, peaks.peak_flops(dtype), peaks.bandwidth)
        out.update(seconds=seconds, tokens_per_s=tokens / seconds, bound=bound)
    return out

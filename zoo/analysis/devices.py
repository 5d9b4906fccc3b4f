"""GPU peak figures for roofline estimates, each row citing the vendor document it came from.

Peaks are dense (no 2:4 sparsity): vendors print the sparse figure first and the dense one
is half of it. bf16 and fp16 are the tensor-core rates with fp32 accumulation (what
PyTorch's matmuls use); fp32 is the plain CUDA-core rate (TF32 off). Bandwidth is the
memory bandwidth of the board named. The roofline is an upper bound: time per step is at
least the FLOPs over peak compute and at least the bytes over peak bandwidth.
"""

from __future__ import annotations

import re

from dataclasses import dataclass

import torch

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

    def peak_flops(self, dtype: torch.dtype) -> float:
        """Peak FLOP/s for matmuls in ``dtype``."""
        tflops = {torch.bfloat16: self.bf16_tflops, torch.float16: self.fp16_tflops}.get(dtype, self.fp32_tflops)
        return tflops * 1e12

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.memory_gb_s * 1e9


GPUS: dict[str, GPUSpec] = {
    g.key: g
    for g in (
        GPUSpec("h100-sxm", "NVIDIA H100 SXM5 80GB", 989.4, 989.4, 66.9, 3350, 80, ("H100 80GB HBM3", "H100 SXM"),
                "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet (H100 SXM: BF16 1,979 TFLOPS with sparsity, FP32 67 TFLOPS, 3.35 TB/s)"),
        GPUSpec("h100-pcie", "NVIDIA H100 PCIe 80GB", 756.5, 756.5, 51.2, 2000, 80, ("H100 PCIe",),
                "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet (H100 PCIe: BF16 1,513 TFLOPS with sparsity, FP32 51 TFLOPS, 2 TB/s)"),
        GPUSpec("h200", "NVIDIA H200 SXM 141GB", 989.4, 989.4, 66.9, 4800, 141, ("H200",),
                "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM: BF16 1,979 TFLOPS with sparsity, FP32 67 TFLOPS, 4.8 TB/s)"),
        GPUSpec("a100-80gb", "NVIDIA A100 SXM4 80GB", 312.0, 312.0, 19.5, 2039, 80, ("A100-SXM4-80GB",),
                "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (A100 80GB SXM: BF16 312 TFLOPS dense, FP32 19.5, 2,039 GB/s)"),
        GPUSpec("l4", "NVIDIA L4 24GB", 121.0, 121.0, 30.3, 300, 24, ("L4",),
                "https://www.nvidia.com/en-us/data-center/l4/ (L4: BF16 242 TFLOPS with sparsity, FP32 30.3 TFLOPS, 300 GB/s)"),
        GPUSpec("rtx-4090", "NVIDIA GeForce RTX 4090 24GB", 165.2, 165.2, 82.6, 1008, 24, ("RTX 4090",),
                "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf (RTX 4090: FP16/BF16 tensor 165.2 TFLOPS dense with FP32 accumulate, FP32 82.6, 1,008 GB/s)"),
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

    source: str  # "spec sheet h100-sxm"; a measured probe says "measured host"
    bandwidth: float  # bytes per second
    flops: dict[torch.dtype, float]  # FLOP/s of matmuls in each dtype
    fallback_flops: float  # any other dtype (plain fp32 rate)

    def peak_flops(self, dtype: torch.dtype) -> float:
        return self.flops.get(dtype, self.fallback_flops)


def gpu_peaks(key: str) -> DevicePeaks:
    """The peaks of a GPU of the table (``--predict`` names one)."""
    board = gpu(key)
    return DevicePeaks(
        source=f"spec sheet {key}", bandwidth=board.bandwidth,
        flops={torch.bfloat16: board.bf16_tflops * 1e12, torch.float16: board.fp16_tflops * 1e12},
        fallback_flops=board.fp32_tflops * 1e12,
    )


def device_peaks(device: str | torch.device, device_name: str) -> DevicePeaks | None:
    """The peaks of the device a run is on, for its achieved fraction of the roofline: the
    spec sheet of a CUDA board of the table (``device_name`` as torch names it); None for
    boards not in the table and, for now, for the CPU and MPS (a measured host probe plugs
    in here)."""
    if torch.device(device).type != "cuda":
        return None
    for key, board in GPUS.items():
        if matches_device(board, device_name):
            return gpu_peaks(key)
    return None


def step_roofline(flops: float, nbytes: float, tokens: int, peaks: DevicePeaks | None, dtype: torch.dtype) -> dict[str, object]:
    """One phase's analytic counterpart: its FLOPs and bytes and, on ``peaks``, the time it
    takes at least (compute or memory, whichever is slower), tokens/s and the bound."""
    out: dict[str, object] = {"flops": int(flops), "bytes": int(nbytes), "seconds": None, "tokens_per_s": None, "bound": None}
    if peaks is not None:
        seconds, bound = _step_time(flops, nbytes, peaks.peak_flops(dtype), peaks.bandwidth)
        out.update(seconds=seconds, tokens_per_s=tokens / seconds, bound=bound)
    return out


@dataclass(frozen=True)
class Roofline:
    """Upper bounds on tokens/s: compute-bound or memory-bound, whichever is slower."""

    gpu: str
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    prefill_bound: str  # "compute" or "memory"
    decode_bound: str


def _step_time(flops: float, nbytes: float, peak_flops: float, bandwidth: float) -> tuple[float, str]:
    compute, memory = flops / peak_flops, nbytes / bandwidth
    return (compute, "compute") if compute >= memory else (memory, "memory")


def roofline(
    spec_or_model: object,
    gpu_key: str,
    *,
    batch_size: int,
    prompt_len: int,
    gen_len: int,
    dtype: torch.dtype,
    weights_dtype: str | None = None,
    group_size: int | None = None,
) -> Roofline:
    """Roofline tokens/s for a run's shape on a GPU of the table.

    Prefill: FLOPs of the whole prompt (``zoo.analysis.counts.forward_flops``) against the weights
    plus the KV cache written once. Decode: one step at the midpoint context
    ``prompt_len + gen_len // 2`` (FLOPs per token × batch; bytes = weights read plus
    the KV cache read at that context, ``zoo.analysis.counts.decode_bytes_per_step``). Quantized
    weights (``weights_dtype`` int8/int4) are read as stored; peaks stay the ``dtype``'s.
    """
    from zoo.analysis.counts import cache_bytes, decode_bytes_per_step, forward_flops, weight_bytes_read

    board = gpu(gpu_key)
    peak, bandwidth = board.peak_flops(dtype), board.bandwidth
    prefill_flops = forward_flops(spec_or_model, prompt_len, prompt_len, batch_size, last_only=True)  # type: ignore[arg-type]
    prefill_bytes = weight_bytes_read(spec_or_model, batch_size * prompt_len, dtype, weights_dtype, group_size) + cache_bytes(  # type: ignore[arg-type]
        spec_or_model, batch_size, prompt_len, dtype=dtype  # type: ignore[arg-type]
    ).total
    prefill_time, prefill_bound = _step_time(prefill_flops, prefill_bytes, peak, bandwidth)
    context = prompt_len + gen_len // 2
    decode_flops = forward_flops(spec_or_model, 1, context, batch_size)  # type: ignore[arg-type]
    decode_bytes = decode_bytes_per_step(spec_or_model, batch_size, context, dtype, weights_dtype, group_size)  # type: ignore[arg-type]
    decode_time, decode_bound = _step_time(decode_flops, decode_bytes, peak, bandwidth)
    return Roofline(
        gpu=gpu_key,
        prefill_tokens_per_s=batch_size * prompt_len / prefill_time,
        decode_tokens_per_s=batch_size / decode_time,
        prefill_bound=prefill_bound,
        decode_bound=decode_bound,
    )


@dataclass(frozen=True)
class EncoderRoofline:
    """Upper bounds for an encoder's forward (tokens/s through the encoder) and, for an
    encoder-decoder, the decoder's start token (cross K/V projected from the memory) and
    its decode steps (self K/V and cross K/V read each step). Decoder fields are None for
    an encoder-only model."""

    gpu: str
    encoder_tokens_per_s: float
    encoder_bound: str
    decoder_prefill_tokens_per_s: float | None = None
    decoder_prefill_bound: str | None = None
    decode_tokens_per_s: float | None = None
    decode_bound: str | None = None

    @property
    def bound(self) -> str:
        parts = [f"encoder: {self.encoder_bound}"]
        if self.decode_bound is not None:
            parts += [f"decoder prefill: {self.decoder_prefill_bound}", f"decode: {self.decode_bound}"]
        return ", ".join(parts)


def encoder_roofline(
    spec_or_model: object, gpu_key: str, *, batch_size: int, prompt_len: int, gen_len: int, dtype: torch.dtype,
) -> EncoderRoofline:
    """Roofline of what ``zoo bench`` runs on an encoder or an encoder-decoder, every figure
    from ``zoo.analysis.counts``.

    Encoder: one forward of ``batch_size`` × ``prompt_len`` tokens (``forward_flops`` of an
    encoder-only model, ``encoder_flops`` of an encoder-decoder's encoder) against its
    weights read once (``encoder_weight_bytes_read``). Encoder-decoder decoder prefill: the
    start token (``forward_flops`` with ``memory_len``) plus the cross K/V projected from
    the memory (``memory_flops``), against the decoder's weights and the cache it writes.
    Decode: one step at the midpoint ``1 + gen_len // 2`` of the decoder's context, reading
    the weights, the self K/V and the cross K/V (``decode_bytes_per_step`` with
    ``memory_len``).
    """
    from zoo.analysis.counts import cache_bytes, decode_bytes_per_step, encoder_flops, forward_flops, topology, weight_bytes_read
    from zoo.analysis.encoder import encoder_weight_bytes_read, memory_flops

    board = gpu(gpu_key)
    peak, bandwidth = board.peak_flops(dtype), board.bandwidth
    B, S = batch_size, prompt_len
    spec = spec_or_model  # type: ignore[assignment]
    encdec = topology(spec) == "encoder-decoder"  # type: ignore[arg-type]
    flops = encoder_flops(spec, S, B) if encdec else forward_flops(spec, S, S, B)  # type: ignore[arg-type]
    encoder_time, encoder_bound = _step_time(flops, encoder_weight_bytes_read(spec, dtype), peak, bandwidth)  # type: ignore[arg-type]
    line = EncoderRoofline(gpu=gpu_key, encoder_tokens_per_s=B * S / encoder_time, encoder_bound=encoder_bound)
    if not encdec:
        return line
    prefill_flops = forward_flops(spec, 1, 1, B, last_only=True, memory_len=S) + memory_flops(spec, S, B)  # type: ignore[arg-type]
    prefill_bytes = weight_bytes_read(spec, B, dtype) + cache_bytes(spec, B, 1, S, dtype=dtype).total  # type: ignore[arg-type]
    prefill_time, prefill_bound = _step_time(prefill_flops, prefill_bytes, peak, bandwidth)
    context = 1 + gen_len // 2
    decode_flops = forward_flops(spec, 1, context, B, memory_len=S)  # type: ignore[arg-type]
    decode_bytes = decode_bytes_per_step(spec, B, context, dtype, memory_len=S)  # type: ignore[arg-type]
    decode_time, decode_bound = _step_time(decode_flops, decode_bytes, peak, bandwidth)
    return EncoderRoofline(
        gpu=gpu_key, encoder_tokens_per_s=line.encoder_tokens_per_s, encoder_bound=encoder_bound,
        decoder_prefill_tokens_per_s=B / prefill_time, decoder_prefill_bound=prefill_bound,
        decode_tokens_per_s=B / decode_time, decode_bound=decode_bound,
    )

"""A training step measured (tokens/s, step time, peak memory, MFU/HFU, loss) and predicted.

``measure_train_step`` and ``predict_train_step`` are the two halves of the harness's
``train_step`` phase: same inputs, comparable dicts. Peak memory on CUDA is the allocator's
``max_memory_allocated``; the CPU allocator keeps no such statistic, so there the peak is
weights, gradients and optimizer state as allocated, plus the activations the allocator saw
the forward hold at its end (``zoo.training.memory_probe``: the profiler's memory events),
and the probe says so.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from torch import nn

from zoo.analysis.devices import device_peaks
from zoo.analysis.training import state_bytes_of, training_flops, training_roofline
from zoo.model.build import ZooModel
from zoo.specs.model import ModelSpec
from zoo.training.config import TrainConfig
from zoo.training.memory_probe import allocator_activations
from zoo.training.objectives import Batch
from zoo.training.optim import measured_state_bytes
from zoo.training.step import Trainer

MFU_FORMULA = "MFU = model FLOPs/step / step time (p50) / peak FLOP/s; HFU counts the recomputed forward too"


def random_batch(trainer: Trainer, config: TrainConfig, generator: torch.Generator) -> Batch:
    """Random token ids shaped for the trainer's objective, on its device."""
    rows = torch.randint(
        trainer.model.spec.vocab_size,
        (config.batch_size, trainer.objective.rows_len(config.seq_len)),
        generator=generator,
    )
    return trainer.objective.batch(rows, generator).to(trainer.device)


def device_peak(device: torch.device, dtype: torch.dtype) -> tuple[float | None, str]:
    """Peak FLOP/s to divide by and where it came from: the same peaks every roofline column of
    a row uses (``zoo.analysis.devices.device_peaks``): a known GPU's spec sheet, the host's
    measured matmul rate at this thread count (``zoo hardware``, cached per machine), and None
    (no MFU) for a board the table lacks, rather than a number measured some other way."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    peaks = device_peaks(device, name)
    if peaks is None:
        return None, f"no peak: {name} is not in zoo.analysis.devices.GPUS"
    return peaks.peak_flops(dtype), f"{peaks.source}, {str(dtype).removeprefix('torch.')} matmul"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_train_step(
    model: ZooModel,
    spec: ModelSpec,
    config: TrainConfig,
    device: torch.device | str,
    dtype: torch.dtype | str | None = None,
) -> dict[str, Any]:
    """Train ``model`` for ``config.warmup`` + ``config.steps`` steps on seeded random tokens."""
    device = torch.device(device)
    torch.manual_seed(config.seed)
    trainer = Trainer(model, config)
    generator = torch.Generator().manual_seed(config.seed)
    batch = random_batch(trainer, config, generator)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, losses = [], []
    for i in range(config.warmup + config.steps):
        _sync(device)
        start = time.perf_counter()
        result = trainer.step(batch)
        _sync(device)
        if i >= config.warmup:
            times.append(time.perf_counter() - start)
            losses.append(result.loss)
    peak, probe = peak_step_memory(trainer, batch, device)
    tokens = batch.tokens
    rates = sorted(tokens / t for t in times)
    model_flops, hardware_flops = training_flops(spec, config.batch_size, config.seq_len, config.checkpointing)
    compute_dtype = torch.bfloat16 if config.precision == "bf16-mixed" else next(model.parameters()).dtype
    peak_flops, peak_source = device_peak(device, compute_dtype)
    step_p50 = statistics.median(times)
    return {
        "objective": trainer.objective.name,
        "optimizer": config.optimizer,
        "precision": config.precision,
        "checkpointing": config.checkpointing,
        "compiled": config.compile,
        "train_tokens_per_s": statistics.median(rates),
        "train_tokens_per_s_min": rates[0],
        "train_tokens_per_s_max": rates[-1],
        "step_s_p50": step_p50,
        "step_s_p90": _quantile(times, 0.9),
        "peak_memory_bytes": peak,
        "peak_memory_probe": probe,
        "model_flops_per_step": model_flops,
        "hardware_flops_per_step": hardware_flops,
        "mfu": None if peak_flops is None else model_flops / step_p50 / peak_flops,
        "hfu": None if peak_flops is None else hardware_flops / step_p50 / peak_flops,
        "mfu_formula": MFU_FORMULA,
        "peak_flops": peak_flops,
        "peak_flops_source": peak_source,
        "loss_first": losses[0],
        "loss_last": losses[-1],
    }


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def peak_step_memory(trainer: Trainer, batch: Batch, device: torch.device) -> tuple[int, str]:
    """Peak bytes of a step and the probe that gave them (CUDA: the allocator's peak so far)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), "torch.cuda.max_memory_allocated"
    params: list[nn.Parameter] = list(trainer.model.parameters())
    weights, grads, _ = state_bytes_of(params, trainer.config.optimizer, trainer.config.momentum)
    activations = allocator_activations(trainer, batch)
    state = measured_state_bytes(trainer.optimizer)
    return (
        weights + grads + state + activations.held_after_forward,
        f"cpu: weights+grads+optimizer state as allocated + activations held after the forward ({activations.probe})",
    )


def predict_train_step(
    spec: ModelSpec, config: TrainConfig, device_name: str, dtype: torch.dtype | str | None = None
) -> dict[str, Any]:
    """The analysed memory breakdown and the training roofline on a named GPU (zoo.analysis.devices)."""
    roof = training_roofline(
        spec,
        device_name,
        config.batch_size,
        config.seq_len,
        optimizer=config.optimizer,
        momentum=config.momentum,
        precision=config.precision,
        checkpointing=config.checkpointing,
    )
    return {
        "gpu": roof.gpu,
        "predicted_step_s": roof.step_s,
        "predicted_train_tokens_per_s": roof.tokens_per_s,
        "bound": roof.bound,
        "model_flops_per_step": roof.model_flops,
        "hardware_flops_per_step": roof.hardware_flops,
        "bytes_moved_per_step": roof.bytes_moved,
        "memory": roof.memory.as_dict(),
        "fits": roof.fits,
        "capacity_bytes": roof.capacity_bytes,
        "formula": roof.formula,
    }

"""Activation memory measured by the allocator, independent of the analysis.

``zoo.analysis.training`` counts activations as what autograd saves (a saved-tensors hook on
fake tensors). Measuring the same way on a real step would only check the tracing, not the
principle, so the probe here asks the allocator instead: how many bytes the forward (and its
loss) allocated and still holds when it ends, which is what backward will consume, whoever
keeps them (autograd's saved tensors, a kernel's workspace kept alive, the loss itself).

- CUDA: ``torch.cuda.memory_allocated`` before and after the forward, and
  ``max_memory_allocated`` through forward and backward.
- CPU (whose allocator keeps no statistics): ``torch.profiler`` with ``profile_memory=True``
  records every allocation and free as a ``[memory]`` event of signed bytes; their running
  sum in time order, from the forward's start, gives the bytes held at the forward's end
  and the peak through backward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from zoo.training.objectives import Batch
from zoo.training.step import Trainer

FORWARD = "zoo.forward"  # the profiler range around the forward, to find where it ends


@dataclass(frozen=True)
class AllocatorActivations:
    """Bytes above what was allocated before the step (weights, optimizer state) are not counted."""

    held_after_forward: int  # allocated by forward + loss and still held at its end: the activations
    peak_forward_backward: int  # the highest bytes allocated at once through forward and backward
    probe: str


def allocator_activations(trainer: Trainer, batch: Batch) -> AllocatorActivations:
    """One forward and backward of ``trainer``'s model on ``batch`` (no optimizer step), measured
    by the allocator of its device; gradients are left as backward makes them."""
    trainer.model.train()
    trainer.optimizer.zero_grad(set_to_none=True)  # backward allocates the gradients: part of the peak
    if trainer.device.type == "cuda":
        return _cuda(trainer, batch)
    return _profiled(trainer, batch)


def _cuda(trainer: Trainer, batch: Batch) -> AllocatorActivations:
    device = trainer.device
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    loss, aux = trainer._forward_loss(batch)
    torch.cuda.synchronize(device)
    held = torch.cuda.memory_allocated(device) - base
    (loss if aux is None else loss + trainer.config.aux_loss_coef * aux).backward()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    return AllocatorActivations(held, peak, "torch.cuda.memory_allocated after the forward, max_memory_allocated")


def _profiled(trainer: Trainer, batch: Batch) -> AllocatorActivations:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function(FORWARD):
            loss, aux = trainer._forward_loss(batch)
        (loss if aux is None else loss + trainer.config.aux_loss_coef * aux).backward()
    events = list(prof.profiler.kineto_results.events())  # type: ignore[union-attr]
    forward_end = max(e.end_ns() for e in events if e.name() == FORWARD)
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    held = live = peak = 0
    for start, nbytes in memory:
        live += nbytes
        peak = max(peak, live)
        if start <= forward_end:
            held = live
    return AllocatorActivations(held, peak, "torch.profiler profile_memory: [memory] alloc/free events summed")

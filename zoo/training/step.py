"""One training step over a zoo model: forward, loss, backward, clip, optimizer step.

Mixed precision is torch's autocast to bfloat16 over float32 weights: the weights the
optimizer updates are the float32 master copy, matmuls run in bf16. Activation checkpointing
wraps each block's forward in ``torch.utils.checkpoint`` (non-reentrant), so a block keeps
only its input and recomputes the rest in backward.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from zoo.model.build import ZooModel
from zoo.training.config import TrainConfig
from zoo.training.moe_aux import RouterLogits
from zoo.training.objectives import Batch, Objective, objective_for
from zoo.training.optim import make_optimizer


def checkpoint_blocks(model: ZooModel) -> None:
    """Recompute every block (decoder and encoder) in backward instead of keeping its activations."""
    stacks = [model.layers] + ([] if model.encoder is None else [model.encoder.layers])
    for layers in stacks:
        for block in layers:
            block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False)


def autocast_for(device: torch.device, config: TrainConfig) -> contextlib.AbstractContextManager:
    """bf16 autocast for ``bf16-mixed``, nothing for float32."""
    if config.precision == "bf16-mixed":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclass
class StepResult:
    loss: float  # the objective's loss (the MoE balancing term not included)
    aux_loss: float | None


class Trainer:
    """A model, its objective, optimizer and step function; ``step(batch)`` trains once."""

    def __init__(
        self,
        model: ZooModel,
        config: TrainConfig,
        objective: Objective | None = None,
        params: list[nn.Parameter] | None = None,
    ) -> None:
        self.model, self.config = model, config
        self.objective = objective or objective_for(model, config)
        self.device = next(model.parameters()).device
        if config.checkpointing:
            checkpoint_blocks(model)
        trainable = params if params is not None else [p for p in model.parameters() if p.requires_grad]
        self.params = list({id(p): p for p in trainable}.values())  # tied weights once
        self.optimizer = make_optimizer(self.params, config)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.routers = RouterLogits(model)
        self._loss = torch.compile(self._forward_loss) if config.compile else self._forward_loss

    def _lr_factor(self, step: int) -> float:
        warm = self.config.warmup_steps
        return min(1.0, (step + 1) / warm) if warm else 1.0

    def _forward_loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor | None]:
        with autocast_for(self.device, self.config), self.routers.recording():
            loss = self.objective.loss(self.model, batch)
            aux = self.routers.loss()
        return loss, aux

    def step(self, batch: Batch) -> StepResult:
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss, aux = self._loss(batch)
        total = loss if aux is None else loss + self.config.aux_loss_coef * aux
        total.backward()
        if self.config.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.params, self.config.grad_clip, foreach=False)
        self.optimizer.step()
        self.schedule.step()
        return StepResult(float(loss.detach()), None if aux is None else float(aux.detach()))

    @torch.no_grad()
    def evaluate(self, batches: list[Batch]) -> float:
        """Mean loss over ``batches`` (eval mode, no update)."""
        self.model.eval()
        losses = []
        for batch in batches:
            with autocast_for(self.device, self.config):
                losses.append(float(self.objective.loss(self.model, batch)))
        return sum(losses) / max(len(losses), 1)

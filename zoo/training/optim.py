"""Optimizers by name, and the bytes of state each keeps per parameter.

AdamW keeps two float32 moments per parameter; SGD with momentum one (none without);
Adafactor a factored second moment: a row and a column vector per matrix, a full vector for
other tensors (torch.optim.Adafactor, Shazeer & Stern 2018, no first moment).
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.errors import TrainingError
from zoo.training.config import TrainConfig


def make_optimizer(params: list[nn.Parameter], config: TrainConfig) -> torch.optim.Optimizer:
    """The configured optimizer over ``params`` (weight decay on matrices, not on vectors)."""
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    if config.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, foreach=False)
    if config.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=config.lr, momentum=config.momentum, foreach=False)
    if config.optimizer == "adafactor":
        return torch.optim.Adafactor(groups, lr=config.lr, foreach=False)
    raise TrainingError(f"optimizer: unknown {config.optimizer!r}; allowed: adafactor, adamw, sgd")


def optimizer_state_elements(shape: tuple[int, ...], config: TrainConfig) -> int:
    """Elements of float32 state the optimizer keeps for one parameter of ``shape`` (its step
    counters, a scalar per parameter, not counted)."""
    numel = 1
    for size in shape:
        numel *= size
    if config.optimizer == "adamw":
        return 2 * numel
    if config.optimizer == "sgd":
        return numel if config.momentum > 0 else 0
    if len(shape) >= 2:  # factored: a row and a column statistic per trailing matrix
        lead = numel // (shape[-1] * shape[-2])
        return lead * (shape[-1] + shape[-2])
    return numel


def measured_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of tensor state the optimizer holds now, scalar step counters excluded."""
    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                total += value.numel() * value.element_size()
    return total

"""Phase ``train_step``: forward, backward and optimizer step on random tokens (``--train``).

The step is zoo.training's own (the objective the topology implies: causal LM, masked LM or
teacher-forced seq2seq; AdamW by default), timed over ``repeats`` steps after ``warmup``,
on a copy of the run's weights in float32 (mixed precision keeps float32 master weights).
It runs last: the inference phases measure the model before any weight changes. Its
roofline is the step's hardware FLOPs (recomputation included) against the bytes it moves
(``zoo.analysis.training``).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from zoo.analysis.devices import DevicePeaks, step_roofline
from zoo.analysis.training import bytes_moved, training_flops, training_memory
from zoo.harness.phases.base import Phase, RunContext
from zoo.harness.run_config import BenchConfig
from zoo.specs.model import ModelSpec
from zoo.training.config import TrainConfig
from zoo.training.measure import measure_train_step


def _train_config(config: BenchConfig) -> Any:
    return TrainConfig(
        batch_size=config.batch_size,
        seq_len=config.prompt_len,
        optimizer=config.train_optimizer,
        precision=config.train_precision,
        checkpointing=config.train_checkpointing,
        compile=config.compile,
        seed=config.seed,
        steps=config.repeats,
        warmup=config.warmup,
    )


class TrainStep(Phase):
    name = "train_step"
    order = 40
    topologies = frozenset({"decoder", "encoder", "encoder-decoder"})
    options = ("train", "train_optimizer", "train_precision", "train_checkpointing")
    fields = (
        "train_tokens_per_s",
        "train_tokens_per_s_min",
        "train_tokens_per_s_max",
        "train_step_s_p50",
        "train_step_s_p90",
        "train_peak_bytes",
        "train_memory_probe",
        "train_mfu",
        "train_hfu",
        "train_peak_flops_source",
        "train_peak_flops",
        "train_model_flops_per_step",
        "train_loss",
        "train_objective",
        "train_memory_analysed",
    )
    rate_field = "train_tokens_per_s"

    def wanted(self, config: BenchConfig) -> bool:
        return config.train

    def measure(self, ctx: RunContext) -> dict[str, Any]:
        ctx.progress("train step")
        train = _train_config(ctx.config)
        model = copy.deepcopy(ctx.model).float().train()  # the inference phases' model stays as it was
        with torch.enable_grad():
            out = measure_train_step(model, ctx.spec, train, ctx.device)
        analysed = training_memory(
            ctx.spec,
            train.batch_size,
            train.seq_len,
            optimizer=train.optimizer,
            precision=train.precision,
            checkpointing=train.checkpointing,
        )
        return {
            "train_tokens_per_s": out["train_tokens_per_s"],
            "train_tokens_per_s_min": out["train_tokens_per_s_min"],
            "train_tokens_per_s_max": out["train_tokens_per_s_max"],
            "train_step_s_p50": out["step_s_p50"],
            "train_step_s_p90": out["step_s_p90"],
            "train_peak_bytes": out["peak_memory_bytes"],
            "train_memory_probe": out["peak_memory_probe"],
            "train_mfu": out["mfu"],
            "train_hfu": out["hfu"],
            "train_peak_flops_source": out["peak_flops_source"],
            "train_peak_flops": out["peak_flops"],
            "train_model_flops_per_step": out["model_flops_per_step"],
            "train_loss": out["loss_last"],
            "train_objective": out["objective"],
            "train_memory_analysed": analysed.total,
        }

    def predict(
        self,
        spec: ModelSpec,
        config: BenchConfig,
        device: DevicePeaks | None,
        dtype: torch.dtype,
        held: nn.Module | None = None,
    ) -> dict[str, Any]:
        """The step's hardware FLOPs against the bytes it moves (``zoo.analysis.training``)."""

        train = _train_config(config)
        memory = training_memory(
            spec,
            train.batch_size,
            train.seq_len,
            optimizer=train.optimizer,
            precision=train.precision,
            checkpointing=train.checkpointing,
        )
        _, hardware = training_flops(spec, train.batch_size, train.seq_len, train.checkpointing)
        compute = torch.bfloat16 if train.precision == "bf16-mixed" else torch.float32
        return step_roofline(
            hardware,
            bytes_moved(memory, train.precision, train.checkpointing),
            train.batch_size * train.seq_len,
            device,
            compute,
        )

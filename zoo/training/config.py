"""TrainConfig: what one training step or short run does, validated once.

Plain pydantic (no torch), so the analysis, the harness and the CLI share one description
of a step: batch and sequence, optimizer, precision, checkpointing, compile.
"""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
)

Optimizer = Literal["adamw", "sgd", "adafactor"]
Precision = Literal["float32", "bf16-mixed"]


class TrainConfig(BaseModel):
    """One training setting. ``bf16-mixed``: float32 weights (the master copy the optimizer
    updates) with bfloat16 autocast compute, as torch AMP does."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    batch_size: PositiveInt = 8
    seq_len: PositiveInt = 128
    optimizer: Optimizer = "adamw"
    lr: PositiveFloat = 3e-4
    weight_decay: NonNegativeFloat = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    momentum: NonNegativeFloat = Field(0.0, description="sgd momentum (0: plain SGD, no state)")
    grad_clip: NonNegativeFloat | None = Field(1.0, description="clip the gradient norm to this; none: no clipping")
    precision: Precision = "float32"
    checkpointing: bool = Field(False, description="recompute each block's forward in backward")
    compile: bool = False
    seed: int = Field(0, ge=0)
    warmup_steps: int = Field(0, ge=0, description="linear warmup of the learning rate")
    aux_loss_coef: NonNegativeFloat = Field(0.01, description="MoE load-balancing loss weight (Switch/Mixtral form)")
    mlm_probability: float = Field(0.15, gt=0, lt=1, description="masked-LM: fraction of tokens predicted (BERT)")
    mask_token_id: int | None = Field(None, ge=0, description="masked-LM: the [MASK] id (default: vocab_size - 1)")
    steps: PositiveInt = Field(10, description="measured steps (benchmark) after warmup")
    warmup: int = Field(2, ge=0, description="benchmark: unmeasured steps first")

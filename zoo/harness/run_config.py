"""How to run one benchmark: ``BenchConfig`` (every run option, validated) and ``make_config``.

Kept apart from the run itself (``zoo.harness.run``): sweeps, the CLI and the results log
read and validate run options (``--set``, ``--vary``) without the timing code; importing
this module imports no torch (checking ``weights_dtype`` does, through ``zoo.quant``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from zoo.analysis.devices import gpu
from zoo.errors import BenchError
from zoo.files.safe_io import check_readable
from zoo.quant import check_group_size, normalize
from zoo.quant.fidelity import EVAL_MAX_BYTES
from zoo.specs.strict_numbers import StrictNumbers

Progress = Callable[[str, int, int], None]  # (what, done, total)


class BenchConfig(StrictNumbers):
    """How to run: defaults keep `zoo bench --arch qwen3-0.6b` under a minute on 2 CPU cores."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    device: str = Field("auto", description="auto (cuda, mps, cpu), cpu, cuda, cuda:N or mps")
    dtype: str | None = Field(None, description="default bfloat16 on CUDA, float32 elsewhere")
    batch_size: int = Field(1, ge=1)
    prompt_len: int = Field(128, ge=1)
    gen_len: int = Field(16, ge=2, description="tokens generated per row: 1 by prefill, the rest by decode")
    repeats: int = Field(2, ge=1, description="timed rounds; medians and spread over these")
    warmup: int = Field(1, ge=1, description="untimed rounds before timing")
    compile: bool = Field(
        False,
        description="fuse q|k|v and gate|up, torch.compile prefill and decode step (CUDA graphs and "
        "coordinate-descent tuning on CUDA; zoo/harness/phases/compiling.py)",
    )
    seed: int = Field(0, ge=0, lt=2**64, description="seed of the random weights and prompt (0 to 2**64 - 1)")
    weights: str | None = Field(
        None,
        description="a checkpoint (hub id, directory or GGUF file) instead of random "
        "weights; a GGUF's 4- to 8-bit matrices stay packed (int4 / int8) and the run "
        "computes in bfloat16 unless dtype says otherwise",
    )
    dequantize: bool = Field(
        False, description="load a GGUF's packed matrices as floats of dtype (default float32 on CPU)"
    )
    predict: str | None = Field(None, description="a GPU of zoo.analysis.devices.GPUS for a roofline estimate")
    threads: int | None = Field(None, ge=1, description="torch CPU threads; default: torch's choice")
    weights_dtype: str | None = Field(
        None,
        description="bf16, float32 (the model in that dtype) or int8, int4 (weight-only quantized linears; "
        "the rest in dtype, default bfloat16); default: unquantized in dtype",
    )
    weights_group_size: int | None = Field(None, description="int4 group size: 32, 64, 128 or 256 (default 32)")
    eval_text: str | None = Field(None, description="a UTF-8 text file whose perplexity the run reports")
    train: bool = Field(False, description="also time a training step (forward, backward, optimizer) on random tokens")
    train_optimizer: Literal["adamw", "sgd", "adafactor"] = Field("adamw", description="the training step's optimizer")
    train_precision: Literal["float32", "bf16-mixed"] = Field(
        "float32", description="the training step's compute: float32, or bf16 autocast over float32 master weights"
    )
    train_checkpointing: bool = Field(
        False, description="recompute each block's forward in the training step's backward"
    )
    train_tokens: int | None = Field(
        None,
        ge=1,
        description="train each variant from scratch for this many tokens of "
        "train_text (seeded) and report its held-out loss (phase train_run)",
    )
    train_text: str | None = Field(None, description="the training text of train_tokens; its last 10% is held out")
    train_tokenizer: str | None = Field(None, description="a tokenizer.json for train_text (default: UTF-8 bytes)")
    train_batch_size: int = Field(8, ge=1, description="rows per step of the train_tokens run (of prompt_len tokens)")
    train_lr: float = Field(1e-3, gt=0, description="the train_tokens run's learning rate (constant)")
    train_dir: str | None = Field(
        None,
        description="where each variant's checkpoint goes, so a run started again "
        "resumes (default: zoo's cache folder, train-runs/)",
    )
    impl: str = Field(
        "auto",
        description="token-mixer implementations: auto (the fastest that runs here), reference "
        "(the pure-PyTorch maths) or a kernel's name (zoo.components.kernels); the row's impl says what ran",
    )

    @field_validator("threads")
    @classmethod
    def _check_threads(cls, value: int | None) -> int | None:
        return check_threads(value, "threads")

    @field_validator("eval_text")
    @classmethod
    def _check_eval_text(cls, value: str | None) -> str | None:
        if value is not None:  # read at the end of the run: refused before it starts
            check_readable(value, BenchError, "eval_text file", EVAL_MAX_BYTES)
        return value

    @field_validator("train_text", "train_tokenizer")
    @classmethod
    def _check_train_files(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:  # read when the phase runs: refused before the run starts
            from zoo.files.safe_io import check_readable
            from zoo.training.data import TEXT_MAX_BYTES

            check_readable(value, BenchError, f"{info.field_name} file", TEXT_MAX_BYTES)
        return value

    @field_validator("weights_dtype")
    @classmethod
    def _check_weights_dtype(cls, value: str | None) -> str | None:
        return normalize(value)

    @model_validator(mode="after")
    def _check_train_run(self) -> BenchConfig:
        if (self.train_tokens is None) != (self.train_text is None):
            raise ValueError(
                "train_tokens and train_text: give both (a token budget and the text it is drawn from) or neither"
            )
        if self.train_tokens is not None and self.weights is not None:
            raise ValueError(
                "train_tokens: trains each variant from scratch; a checkpoint (weights) is fine-tuned "
                "by `zoo train --weights`"
            )
        return self

    @model_validator(mode="after")
    def _check_predict(self) -> BenchConfig:
        if self.weights_group_size is not None:
            check_group_size(self.weights_group_size)
        if self.predict is not None:
            gpu(self.predict)
        return self


def check_threads(value: int | None, name: str) -> int | None:
    """CPU threads are bounded by the machine: more threads than cores only contend."""
    cores = os.cpu_count() or 1
    if value is not None and not 1 <= value <= cores:
        raise ValueError(f"{name}: {value:,}; allowed: 1 to {cores} (this machine's CPU cores)")
    return value


def make_config(**options: Any) -> BenchConfig:
    """A BenchConfig, with validation errors as one-line BenchErrors naming the field."""
    try:
        return BenchConfig(**options)
    except ValidationError as exc:
        parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise BenchError("; ".join(parts)) from None

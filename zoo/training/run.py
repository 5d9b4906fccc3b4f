"""A short training run from scratch for a fixed token budget: loss curve, held-out loss,
tokens/s, a resumable safetensors checkpoint. What ``zoo train`` and compare's training
columns run.

Each step's batch comes from a generator seeded with (seed, step), so a resumed run draws the
same batches as an uninterrupted one; on the CPU two runs with one seed are bit-identical.
"""

from __future__ import annotations

import functools
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from zoo.analysis.training import training_memory
from zoo.errors import TrainingError
from zoo.files.atomic import atomic_path, write_text_atomic
from zoo.model.build import ZooModel, build
from zoo.specs.model import ModelSpec
from zoo.training.config import TrainConfig
from zoo.training.data import held_out_rows, load_text, rows_at
from zoo.training.lora import LoraConfig, apply_lora, save_adapters, trainable_count
from zoo.training.measure import peak_step_memory
from zoo.training.objectives import Batch
from zoo.training.plots import plot_losses
from zoo.training.qat import apply_qat, remove_qat
from zoo.training.step import Trainer


@dataclass
class TrainResult:
    held_out_loss: float
    perplexity: float
    tokens_per_s: float
    tokens: int
    steps: int
    tokenizer: str
    curve: list[tuple[int, float]] = field(default_factory=list)  # (tokens seen, training loss)
    trainable_params: int = 0
    step_memory_measured: int = 0  # bytes: weights, grads, optimizer state as allocated + saved activations
    step_memory_analysed: int = 0  # zoo.analysis.training.training_memory(...).total
    held_out_loss_ptq: float | None = None  # with the weights quantized after training (FineTune.ptq)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _step_generator(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


def _frozen(model: nn.Module) -> set[str]:
    return {name for name, p in model.named_parameters(remove_duplicate=False) if not p.requires_grad}


def save_checkpoint(trainer: Trainer, step: int, curve: list[tuple[int, float]], out: Path) -> None:
    """Trained weights (not frozen ones: a LoRA run keeps its base checkpoint where it is) and
    optimizer state in safetensors, the step and curve in JSON; never pickle."""
    frozen = _frozen(trainer.model)
    tensors = {f"model.{k}": v.contiguous() for k, v in trainer.model.state_dict().items() if k not in frozen}
    state = trainer.optimizer.state_dict()
    for index, entry in state["state"].items():
        for name, value in entry.items():
            tensors[f"optim.{index}.{name}"] = torch.as_tensor(value).clone()
    with atomic_path(out / "checkpoint.safetensors") as tmp:
        save_file(_unshared(tensors), str(tmp))
    meta = {
        "step": step,
        "curve": curve,
        "param_groups": state["param_groups"],
        "schedule": trainer.schedule.state_dict(),
    }
    write_text_atomic(out / "checkpoint.json", json.dumps(meta))


def _unshared(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses tensors sharing memory (tied weights): keep the first name's copy.
    Tied tensors start at one address; distinct weights in one arena (``rehome``) do not."""
    seen: set[int] = set()
    out = {}
    for name, tensor in tensors.items():
        key = tensor.data_ptr()
        out[name] = tensor.clone() if key in seen else tensor
        seen.add(key)
    return out


def load_checkpoint(trainer: Trainer, out: Path) -> tuple[int, list[tuple[int, float]]]:
    """Restore weights, optimizer and schedule; the step reached and the curve so far."""
    meta_path, weights_path = out / "checkpoint.json", out / "checkpoint.safetensors"
    if not meta_path.is_file() or not weights_path.is_file():
        raise TrainingError(f"--resume: no checkpoint in {out} (checkpoint.safetensors and checkpoint.json)")
    tensors = load_file(str(weights_path))
    model_state = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    missing, unexpected = trainer.model.load_state_dict(model_state, strict=False)
    if unexpected or set(missing) - _frozen(trainer.model):
        raise TrainingError(
            f"--resume: {weights_path} does not fit this model; unexpected {unexpected[:3]}, "
            f"missing {sorted(set(missing) - _frozen(trainer.model))[:3]}"
        )
    trainer.model.tie_weights()
    meta = json.loads(meta_path.read_text())
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = value
    trainer.optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    trainer.schedule.load_state_dict(meta["schedule"])
    return int(meta["step"]), [tuple(p) for p in meta["curve"]]


@dataclass(frozen=True)
class FineTune:
    """How a run departs from training every weight of a freshly built model: a loaded model
    (``--weights``), LoRA adapters, fake-quantized weights (QAT)."""

    model: ZooModel | None = None
    lora: LoraConfig | None = None
    qat: str | None = None
    qat_group_size: int | None = None
    ptq: str | None = None  # also report the held-out loss with the trained weights quantized (int8/int4)

    def prepare(self, spec: ModelSpec, seed: int) -> ZooModel:
        model = self.model if self.model is not None else build(spec, seed=seed)
        if self.qat is not None:
            apply_qat(model, self.qat, self.qat_group_size)
        if self.lora is not None:
            apply_lora(model, self.lora)
        return model

    def quantized_loss(self, trainer: Trainer, batches: list) -> float | None:  # type: ignore[type-arg]
        """Held-out loss of the trained weights post-training-quantized (zoo.quant's maths)."""
        if self.ptq is None:
            return None
        apply_qat(trainer.model, self.ptq, self.qat_group_size)
        try:
            return trainer.evaluate(batches)
        finally:
            remove_qat(trainer.model)

    def analysed_memory(self, spec: ModelSpec, config: TrainConfig) -> int:
        """The analysis's total for this step (LoRA: adapters' gradients and state only)."""
        adapt = None if self.lora is None else functools.partial(apply_lora, config=self.lora)
        return training_memory(
            spec,
            config.batch_size,
            config.seq_len,
            optimizer=config.optimizer,
            momentum=config.momentum,
            precision=config.precision,
            checkpointing=config.checkpointing,
            adapt=adapt,
        ).total


def train_variant(
    spec: ModelSpec,
    text_path: str | Path,
    tokens: int,
    seed: int = 0,
    *,
    config: TrainConfig | None = None,
    tokenizer: str | Path | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    checkpoint_every: int = 0,
    tune: FineTune | None = None,
) -> TrainResult:
    """Train ``spec`` (from scratch, or ``tune.model``) on the first 90% of the text for
    ``tokens`` training tokens, then evaluate the loss on the last 10%. ``out``: where the
    curve, checkpoint (and LoRA adapters) go."""
    config, tune = (config or TrainConfig()).model_copy(update={"seed": seed}), tune or FineTune()
    text = load_text(text_path, tokenizer)
    if text.vocab_size > spec.vocab_size:
        raise TrainingError(
            f"vocab_size: the spec has {spec.vocab_size} tokens, the tokenizer ({text.tokenizer}) "
            f"{text.vocab_size}; set vocab_size={text.vocab_size}"
        )
    trainer = Trainer(tune.prepare(spec, seed), config)
    rows_len = trainer.objective.rows_len(config.seq_len)
    per_step = config.batch_size * rows_len
    steps = max(1, tokens // per_step)
    out_dir = None if out is None else Path(out)
    start, curve = load_checkpoint(trainer, out_dir) if resume and out_dir is not None else (0, [])
    elapsed, trained = 0.0, 0
    for step in range(start, steps):
        generator = _step_generator(seed, step)
        batch = trainer.objective.batch(rows_at(text.train, config.batch_size, rows_len, generator), generator)
        batch = batch.to(trainer.device)
        began = time.perf_counter()
        result = trainer.step(batch)
        elapsed += time.perf_counter() - began
        trained += batch.tokens
        curve.append(((step + 1) * per_step, result.loss))
        if out_dir is not None and checkpoint_every and (step + 1) % checkpoint_every == 0:
            save_checkpoint(trainer, step + 1, curve, out_dir)
    eval_batches = _held_out_batches(trainer, text.held_out, rows_len, config.batch_size, seed)
    loss = trainer.evaluate(eval_batches)
    measured, _ = peak_step_memory(trainer, eval_batches[0], trainer.device)
    result = TrainResult(
        loss,
        math.exp(min(loss, 50.0)),
        trained / elapsed if elapsed else 0.0,
        steps * per_step,
        steps,
        text.tokenizer,
        curve,
        trainable_count(trainer.model),
        measured,
        tune.analysed_memory(spec, config),
        tune.quantized_loss(trainer, eval_batches),
    )
    if out_dir is not None:
        _save_run(trainer, tune, steps, curve, result, out_dir)
    return result


def _held_out_batches(
    trainer: Trainer, held_out: torch.Tensor, rows_len: int, batch_size: int, seed: int
) -> list[Batch]:
    """The held-out text cut into rows and batched, each batch with its own seeded generator
    (the masking of a masked-LM objective), on the trainer's device."""
    held = held_out_rows(held_out, rows_len)
    return [
        trainer.objective.batch(held[i : i + batch_size], _step_generator(seed, -1 - i)).to(trainer.device)
        for i in range(0, len(held), batch_size)
    ]


def _save_run(
    trainer: Trainer, tune: FineTune, steps: int, curve: list[tuple[int, float]], result: TrainResult, out: Path
) -> None:
    """The final checkpoint, the loss curve and (LoRA) the adapters, in ``out``."""
    save_checkpoint(trainer, steps, curve, out)
    _write_curve(out, curve, result)
    if tune.lora is not None:
        save_adapters(trainer.model, tune.lora, out)


def _write_curve(out: Path, curve: list[tuple[int, float]], result: TrainResult) -> None:
    lines = "".join(json.dumps({"tokens": t, "loss": loss}) + "\n" for t, loss in curve)
    write_text_atomic(out / "loss.jsonl", lines)
    summary = {k: v for k, v in result.as_dict().items() if k != "curve"}
    write_text_atomic(out / "result.json", json.dumps(summary, indent=2) + "\n")
    plot_losses({"train": curve}, out / "loss.png")

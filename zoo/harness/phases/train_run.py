"""Phase ``train_run``: a short training run from scratch, so a row puts what a variant buys
in quality (held-out loss) beside what it costs (parameters, KV bytes, tokens/s).

``--train-tokens N --train-text FILE``: the run's model (the spec at the run's depth, built
afresh in float32 with the run's seed) is trained by ``zoo.training.run.train_variant`` for N
tokens of the text's first 90% in rows of ``prompt_len`` tokens, ``train_batch_size`` rows a
step, and evaluated on the last 10%. The tokenizer is a given tokenizer.json or UTF-8 bytes,
named in the row.

Resumable like a sweep: each variant trains in a folder of its own, named by a hash of what
decides its result (the spec, the training settings, the token budget, the seed and the
bytes of the text and tokenizer), checkpointed every ``CHECKPOINT_EVERY`` steps in
safetensors. A run started again after an interruption resumes from the last checkpoint, and
one that finished is read back rather than trained again (``train_run_start_step`` says
which). The phase runs after the inference phases and the training step: it changes no
weight they measure.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from zoo.harness.phases.base import Phase, RunContext
from zoo.harness.run_config import BenchConfig

CHECKPOINT_EVERY = 50  # steps between checkpoints: an interrupted variant loses at most this many
CURVE_POINTS = 512  # the row keeps at most this many points of the loss curve (the folder keeps every step)


def train_settings(config: BenchConfig) -> Any:
    """The run's ``TrainConfig``: rows of ``prompt_len`` tokens, the train_step phase's
    optimizer, precision and checkpointing, a constant learning rate."""
    from zoo.training.config import TrainConfig

    return TrainConfig(
        batch_size=config.train_batch_size,
        seq_len=config.prompt_len,
        lr=config.train_lr,
        optimizer=config.train_optimizer,
        precision=config.train_precision,
        checkpointing=config.train_checkpointing,
        seed=config.seed,
    )


def _file_digest(path: str | None) -> str | None:
    if path is None:
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as handle:  # the size was checked when the option was validated
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def run_folder(ctx: RunContext) -> Path:
    """The variant's folder: ``train_dir`` (default zoo's cache, train-runs/) / a hash of what
    decides the result, so the same variant finds its checkpoint and another never does."""
    from zoo.files.cache import cache_dir

    config = ctx.config
    decides = {
        "spec": ctx.spec.to_dict(),
        "train": train_settings(config).model_dump(mode="json"),
        "tokens": config.train_tokens,
        "text": _file_digest(config.train_text),
        "tokenizer": _file_digest(config.train_tokenizer),
        "device": ctx.device.type,
    }
    key = hashlib.sha256(json.dumps(decides, sort_keys=True).encode()).hexdigest()[:16]
    base = Path(config.train_dir) if config.train_dir is not None else cache_dir() / "train-runs"
    return base / key


def _thinned(curve: list[tuple[int, float]]) -> list[tuple[int, float]]:
    stride = max(1, -(-len(curve) // CURVE_POINTS))
    kept = curve[::stride]
    return kept if not curve or kept[-1] == curve[-1] else [*kept, curve[-1]]


def _finished(folder: Path) -> dict[str, Any] | None:
    """An earlier run's result and curve, if it finished in ``folder``."""
    result, curve = folder / "result.json", folder / "loss.jsonl"
    if not (result.is_file() and curve.is_file()):
        return None
    summary = json.loads(result.read_text(encoding="utf-8"))
    points = [json.loads(line) for line in curve.read_text(encoding="utf-8").splitlines() if line]
    return {**summary, "curve": [(p["tokens"], p["loss"]) for p in points]}


def _started_at(folder: Path) -> int:
    meta = folder / "checkpoint.json"
    return int(json.loads(meta.read_text(encoding="utf-8"))["step"]) if meta.is_file() else 0


class TrainRun(Phase):
    name = "train_run"
    order = 50
    topologies = frozenset({"decoder", "encoder", "encoder-decoder"})
    options = (
        "train_tokens",
        "train_text",
        "train_tokenizer",
        "train_batch_size",
        "train_lr",
        "train_dir",
        "train_optimizer",
        "train_precision",
        "train_checkpointing",
    )
    fields = (
        "train_held_out_loss",
        "train_perplexity",
        "train_run_tokens",
        "train_run_tokens_per_s",
        "train_tokenizer",
        "train_run_start_step",
        "train_run_dir",
        "train_curve",
    )

    def wanted(self, config: BenchConfig) -> bool:
        return config.train_tokens is not None

    def measure(self, ctx: RunContext) -> dict[str, Any]:
        from zoo.model.build import build
        from zoo.training.run import FineTune, train_variant

        ctx.progress("train run")
        config, folder = ctx.config, run_folder(ctx)
        done = _finished(folder)
        start = done["steps"] if done is not None else _started_at(folder)
        if done is None:
            model = build(ctx.spec, device=ctx.device, dtype=torch.float32, seed=config.seed)
            with torch.enable_grad():
                result = train_variant(
                    ctx.spec,
                    config.train_text,
                    config.train_tokens,
                    config.seed,
                    config=train_settings(config),
                    tokenizer=config.train_tokenizer,
                    out=folder,
                    resume=start > 0,
                    checkpoint_every=CHECKPOINT_EVERY,
                    tune=FineTune(model),
                )
            done = {**result.as_dict(), "tokens_per_s": result.tokens_per_s if start < result.steps else None}
        return {
            "train_held_out_loss": done["held_out_loss"],
            "train_perplexity": done["perplexity"],
            "train_run_tokens": done["tokens"],
            "train_run_tokens_per_s": done["tokens_per_s"] or None,
            "train_tokenizer": done["tokenizer"],
            "train_run_start_step": start,
            "train_run_dir": str(folder),
            "train_curve": _thinned([(int(t), float(loss)) for t, loss in done["curve"]]),
        }

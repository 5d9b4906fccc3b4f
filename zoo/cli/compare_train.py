"""`zoo compare`'s training-run options (``--train-tokens N --train-text FILE``): each variant
trained from scratch, its held-out loss beside its cost. The options are run options
(``BenchConfig``'s train_* fields), so ``--vary train_lr=...`` and sweep files take them too;
the harness's ``train_run`` phase does the work."""

from __future__ import annotations

import argparse
from typing import Any

TRAIN_COLUMNS = ("train_held_out_loss", "train_perplexity", "train_run_tokens_per_s", "train_tokenizer")


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group(
        "training run",
        "train each variant from scratch for a token budget and report its held-out loss beside "
        "its cost (phase train_run); a checkpoint per variant (safetensors), so the same command run again resumes",
    )
    group.add_argument("--train-tokens", type=int, metavar="N", help="training tokens per variant (seeded by --seed)")
    group.add_argument("--train-text", metavar="FILE", help="the training text; its last 10%% is held out")
    group.add_argument(
        "--train-tokenizer",
        metavar="tokenizer.json",
        help="a tokenizers file (default: UTF-8 bytes, vocabulary 256: --set vocab_size=256)",
    )
    group.add_argument(
        "--train-batch-size", type=int, metavar="ROWS", help="rows per step, each of --prompt-len tokens (default: 8)"
    )
    group.add_argument("--train-lr", type=float, metavar="LR", help="learning rate, AdamW, constant (default: 1e-3)")
    group.add_argument(
        "--train-dir",
        metavar="DIR",
        help="where the per-variant checkpoints go (default: zoo's cache folder, train-runs/)",
    )
    group.add_argument("--seed", type=int, help="seed of the weights and the batches (default: 0)")


def train_options(args: argparse.Namespace) -> dict[str, Any]:
    """The given training-run options as BenchConfig fields."""
    given = {
        "train_tokens": args.train_tokens,
        "train_text": args.train_text,
        "train_tokenizer": args.train_tokenizer,
        "train_batch_size": args.train_batch_size,
        "train_lr": args.train_lr,
        "train_dir": args.train_dir,
        "seed": args.seed,
    }
    return {k: v for k, v in given.items() if v is not None}

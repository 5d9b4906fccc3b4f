"""`zoo probe mqar`: recall accuracy beside exact state bytes, one row per variant and pair count."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.cli.common import add_spec_arguments, load_spec

if TYPE_CHECKING:  # the CLI imports torch-heavy modules only when a command runs
    from zoo.specs.model import ModelSpec
    from zoo.training.config import TrainConfig
    from zoo.training.mqar import MQARSetting


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("probe", help="quality probes beside cost: mqar (multi-query associative recall)")
    p.add_argument("task", choices=["mqar"], help="the probe (Zoology's MQAR)")
    add_spec_arguments(p)
    p.add_argument("--vary", metavar="KEY=V1,V2", help="one variant per value, e.g. attention.kind=gqa,linear")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL:KEY=VALUE,...",
        help="a named variant with its own overrides (repeatable), e.g. gdn:attention.kind=gated_deltanet,"
        "attention.n_k_heads=2,attention.n_v_heads=2",
    )
    p.add_argument("--pairs", default="8", help="key-value pair counts, comma separated (default 8)")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--vocab", type=int, default=8192, help="MQAR vocabulary (Zoology: 8192); sets vocab_size")
    p.add_argument("--steps", type=int, default=1000, help="training steps per variant")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.1, help="AdamW weight decay on matrices (Zoology: 0.1)")
    p.add_argument(
        "--random-non-queries",
        action="store_true",
        help="fill the slots between queries with random tokens (Zoology's generator default); off by "
        "default as in the paper's Figure 2 configs: with a small vocab random filler repeats keys",
    )
    p.add_argument("--train-examples", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    p.add_argument("--jobs", type=int, default=1, help="variants trained at once, one process each (default 1)")
    p.add_argument("--out", metavar="DIR", help="write mqar-<name>.md, .jsonl and .png here")
    p.add_argument("--name", default="probe", help="file name stem under --out")
    p.add_argument(
        "--from-jsonl",
        action="append",
        default=[],
        metavar="FILE",
        help="train nothing: write --out/--name's table, rows and plot from earlier runs' mqar-*.jsonl "
        "(repeatable; a later file's row replaces an earlier row of the same variant and pair count)",
    )
    p.set_defaults(func=run)


def variants(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """(label, overrides) for each variant: --vary values, then --variant entries."""
    out: list[tuple[str, list[str]]] = []
    if args.vary:
        key, _, values = args.vary.partition("=")
        out += [(value, [f"{key}={value}"]) for value in values.split(",") if value]
    for entry in args.variant:
        label, _, sets = entry.partition(":")
        out.append((label, [s for s in sets.split(",") if s]))
    return out or [("base", [])]


def merged_rows(paths: list[str]) -> list[dict[str, object]]:
    """Rows of several runs' .jsonl in one table: by pair count, then first appearance; a later
    file's row for a (variant, pairs) already seen replaces it in place (a rerun of one variant)."""
    rows: dict[tuple[str, int], dict[str, object]] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows[(str(row["variant"]), int(row["num_kv_pairs"]))] = row
    return sorted(rows.values(), key=lambda r: int(str(r["num_kv_pairs"])))


def run(args: argparse.Namespace) -> int:
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from zoo.training.config import TrainConfig
    from zoo.training.mqar import MQARSetting

    if args.from_jsonl:
        if not args.out:
            from zoo.errors import TrainingError

            raise TrainingError("--out: required with --from-jsonl (where the merged table and plot go)")
        write(merged_rows(args.from_jsonl), Path(args.out), args.name)
        return 0
    base = load_spec(args).override({"vocab_size": args.vocab, "max_seq_len": max(args.seq_len, 2)})
    # Zoology's optimizer: AdamW with torch's betas (0.9, 0.999), not zoo's LM default (0.9, 0.95).
    config = TrainConfig(
        batch_size=args.batch_size, lr=args.lr, weight_decay=args.weight_decay, betas=(0.9, 0.999), seed=args.seed
    )
    tasks = [
        (
            label,
            base.override(sets) if sets else base,
            MQARSetting(
                vocab_size=args.vocab,
                seq_len=args.seq_len,
                num_kv_pairs=int(pairs),
                random_non_queries=args.random_non_queries,
            ),
        )
        for pairs in args.pairs.split(",")
        for label, sets in variants(args)
    ]
    rows = []
    with ProcessPoolExecutor(
        max(1, args.jobs), mp_context=get_context("spawn"), initializer=_threads, initargs=(args.threads,)
    ) as pool:
        futures = [
            pool.submit(_probe, label, spec, setting, config, args.steps, args.train_examples)
            for label, spec, setting in tasks
        ]
        for future in futures:  # in task order, so the table's rows are too
            result = future.result()
            rows.append(result)
            print(
                f"{result['variant']:>16} pairs={result['num_kv_pairs']:<3} "
                f"state={result['state_bytes_per_sequence']:>9,} B  acc={result['accuracy']:.3f}  "
                f"loss={result['final_loss']:.3f}  {result['seconds']:.0f}s",
                flush=True,
            )
            if args.out:
                write(rows, Path(args.out), args.name)
    return 0


def _threads(threads: int | None) -> None:
    import torch

    if threads:
        torch.set_num_threads(threads)


def _probe(
    label: str, spec: ModelSpec, setting: MQARSetting, config: TrainConfig, steps: int, n_train: int
) -> dict[str, object]:
    """One variant in a worker process (spawned: a fresh torch, its own threads)."""
    from zoo.training.probe import probe_variant

    return probe_variant(label, spec, setting, config, steps, n_train=n_train).as_dict()


def write(rows: list[dict[str, object]], out: Path, name: str) -> None:
    """The table (markdown), the rows (jsonl) and accuracy against state bytes (png)."""
    from zoo.files.atomic import write_text_atomic as write_text
    from zoo.training.plots import plot_recall

    out.mkdir(parents=True, exist_ok=True)
    head = (
        "| variant | mixer | params | state/KV bytes per seq | pairs | seq | steps | loss | recall |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = [
        f"| {r['variant']} | {r['attention']} | {r['params']:,} | {r['state_bytes_per_sequence']:,} | "
        f"{r['num_kv_pairs']} | {r['seq_len']} | {r['steps']} | {r['final_loss']:.3f} | {r['accuracy']:.3f} |"
        for r in rows
    ]
    write_text(out / f"mqar-{name}.md", head + "\n".join(lines) + "\n")
    write_text(out / f"mqar-{name}.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    plot_recall(rows, out / f"mqar-{name}.png")

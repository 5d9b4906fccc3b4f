"""`zoo bench`: measure one model — parameters, memory, KV cache, tokens/s — and record it."""

from __future__ import annotations

import argparse
import sys

from zoo.cli.bench_output import row_table
from zoo.cli.common import add_spec_arguments, load_spec, progress_bar
from zoo.cli.output import add_format_arguments, print_json, print_table

DEFAULTS_NOTE = (
    "Defaults (batch 1, prompt 128, gen 16, 1 warm-up round, 2 timed repeats, float32 on "
    "CPU / bfloat16 on CUDA) keep `zoo bench --arch qwen3-0.6b` under a minute on a 2-core "
    "CPU, model build included. Weights are random unless --weights is given. Each run is "
    "appended to results/bench.jsonl (and rendered to .csv and .md) under the current folder, "
    "creating it: the documented default; --no-save writes nothing, --results-dir chooses the folder."
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="measure params, memory, KV cache and tokens/s of one model",
        description="Measure one model: parameters, weight and KV bytes, peak memory and tokens/s "
        "of prefill and decode, time to first token. " + DEFAULTS_NOTE,
    )
    add_spec_arguments(p)
    _add_weights_arguments(p)
    _add_run_arguments(p)
    _add_train_arguments(p)
    add_format_arguments(p)
    p.add_argument(
        "--results-dir",
        default="results",
        help="where results are appended, created if absent (default: results/ under the current folder)",
    )
    p.add_argument("--results-name", default="bench", help="results file stem: NAME.jsonl, .csv, .md (default: bench)")
    p.add_argument("--no-save", action="store_true", help="do not append to the results files")
    p.set_defaults(func=run_bench)


def _add_weights_arguments(p: argparse.ArgumentParser) -> None:
    """Which weights, on which device, in which dtype and layout."""
    g = p.add_argument_group("weights")
    g.add_argument(
        "--weights",
        metavar="ID_OR_DIR",
        help="benchmark a real checkpoint instead of random weights: a "
        "hub id, a folder or a GGUF file (its 4- to 8-bit matrices stay packed as int4 / int8)",
    )
    g.add_argument(
        "--dequantize",
        action="store_true",
        help="load a GGUF's packed matrices as floats of --dtype instead (default float32 on CPU)",
    )
    g.add_argument(
        "--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps (default: auto)"
    )
    g.add_argument(
        "--dtype",
        help="float32, bfloat16, float16 (default: bfloat16 on CUDA and for quantized weights, "
        "a packed GGUF's included; float32 elsewhere)",
    )
    g.add_argument(
        "--weights-dtype",
        metavar="KIND",
        help="bf16, float32 (the model in that dtype), int8 or int4 (weight-only quantized linear layers, "
        "the rest in --dtype, default bfloat16) (default: unquantized)",
    )
    g.add_argument(
        "--weights-group-size", type=int, metavar="N", help="int4 group size: 32, 64, 128, 256 (default: 32)"
    )
    g.add_argument(
        "--eval-text",
        metavar="FILE",
        help="report the perplexity of this UTF-8 text file, tokenized by "
        "the checkpoint's own tokenizer (a checkpoint without one is an error); random weights, which "
        "have no tokenizer, score its UTF-8 bytes (a quantization fidelity check)",
    )


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The shape and timing of the run."""
    g = p.add_argument_group("run")
    g.add_argument("--batch-size", type=int, default=1, help="rows per batch (default: 1)")
    g.add_argument("--prompt-len", type=int, default=128, help="prompt tokens per row (default: 128)")
    g.add_argument(
        "--gen-len",
        type=int,
        help="tokens generated per row, the first by prefill (default: 16; an encoder generates none)",
    )
    g.add_argument("--repeats", type=int, default=2, help="timed rounds; medians and spread over them (default: 2)")
    g.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default: 1)")
    g.add_argument("--compile", action="store_true", help="torch.compile the decode step (reduce-overhead on CUDA)")
    g.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    g.add_argument(
        "--impl",
        default="auto",
        metavar="NAME",
        help="token-mixer implementations: auto (the fastest that runs here), reference (pure PyTorch) "
        "or a kernel's name: cpu-scan, cpu-step, mamba-ssm, fla (default: auto)",
    )
    g.add_argument("--seed", type=int, default=0, help="seed of the random weights and prompt (default: 0)")
    g.add_argument(
        "--predict",
        metavar="GPU",
        help="roofline estimate on a GPU: h100-sxm, h100-pcie, h200, a100-80gb, l4, rtx-4090",
    )


def _add_train_arguments(p: argparse.ArgumentParser) -> None:
    """The optional training step (phase train_step)."""
    g = p.add_argument_group("training step")
    g.add_argument(
        "--train",
        action="store_true",
        help="also time a training step: forward, backward and optimizer "
        "on random tokens (batch --batch-size, sequence --prompt-len), with MFU and peak memory",
    )
    g.add_argument(
        "--train-optimizer",
        choices=("adamw", "sgd", "adafactor"),
        default="adamw",
        help="the training step's optimizer (default: adamw)",
    )
    g.add_argument(
        "--train-precision",
        choices=("float32", "bf16-mixed"),
        default="float32",
        help="float32, or bf16 autocast over float32 master weights (default: float32)",
    )
    g.add_argument("--train-checkpointing", action="store_true", help="recompute each block's forward in backward")


def run_bench(args: argparse.Namespace) -> int:
    from rich.console import Console

    from zoo.harness.run import bench
    from zoo.harness.run_config import make_config

    options = dict(
        device=args.device,
        dtype=args.dtype,
        batch_size=args.batch_size,
        prompt_len=args.prompt_len,
        repeats=args.repeats,
        warmup=args.warmup,
        compile=args.compile,
        seed=args.seed,
        weights=args.weights,
        predict=args.predict,
        threads=args.threads,
        dequantize=args.dequantize,
        **({} if args.gen_len is None else {"gen_len": args.gen_len}),
        weights_dtype=args.weights_dtype,
        weights_group_size=args.weights_group_size,
        eval_text=args.eval_text,
        impl=args.impl,
        **(
            {
                "train": True,
                "train_optimizer": args.train_optimizer,
                "train_precision": args.train_precision,
                "train_checkpointing": args.train_checkpointing,
            }
            if args.train
            else {}
        ),
    )
    make_config(**options)  # a bad option is one line before anything is read or measured
    spec = None if args.weights and not (args.arch or args.spec_file or args.hf_config) else load_spec(args)
    if not args.no_save:  # an unwritable folder or damaged log fails now, not after the run
        from zoo.harness.report.tables import check_results

        check_results(args.results_dir, args.results_name)
    with progress_bar(Console(stderr=True), "bench") as update:
        row = bench(spec, progress=update, **options)
    saved = None
    if not args.no_save:  # every topology's row goes to the same log (zoo.harness.report.tables)
        from zoo.harness.report.tables import append_result

        saved = append_result(row, args.results_dir, args.results_name)
    if args.format == "json":
        print_json(row.model_dump(mode="json"))
    elif args.format == "csv":  # every column, raw numbers: the results CSV's rendering of this one row
        from zoo.harness.report.tables import render_csv

        sys.stdout.write(render_csv([row]))
    else:
        print_table(row_table(row), args.format)
    if saved:
        sys.stderr.write(f"zoo: appended to {saved['jsonl']} (rendered: {saved['csv']}, {saved['md']})\n")  # unwrapped
    return 0

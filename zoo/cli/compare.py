"""`zoo compare` (variants of one model side by side) and `zoo sweep FILE` (a TOML grid,
logged row by row, resumable)."""

from __future__ import annotations

import argparse
import sys

from zoo.cli.common import progress_bar
from zoo.cli.compare_output import print_frame
from zoo.cli.compare_train import add_train_arguments, train_options
from zoo.cli.output import add_format_arguments

COMPARE_NOTE = (
    "Analysis columns (parameters, weight and KV bytes, FLOPs) are exact, of the full-size model. "
    "Timing columns come from `zoo bench`'s harness, each variant in its own process, on the "
    "model cut to --depth layers (default 2, so a CPU compares a 1B model in under a minute; "
    "--depth full for every layer) with the bench defaults (prompt 128, gen 16). "
    "--analysis-only skips the timing: instant. "
    "--contexts 4k,32k,128k adds a table with one row per variant and context: memory (weights + "
    "cache, exact) and decode tokens/s, measured up to --measure-up-to and predicted beyond."
)
CONTEXTS_HELP = (
    "context lengths (k = 1024), e.g. 4k,8k,16k,32k,64k,128k: memory and decode tokens/s per variant "
    "at each, one row per variant and context; decode measured up to --measure-up-to, predicted beyond"
)
MAX_POINTS_HELP = "refuse a grid of more points than this (default: 1000; each point is a run)"
MEASURE_UP_TO_HELP = "measure decode at contexts up to this (e.g. 8k), predict beyond (default: 4k on CPU, 32k on CUDA)"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    _add_compare_parser(subparsers)
    _add_sweep_parser(subparsers)


def _add_compare_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "compare",
        help="variants of a model side by side (--vary, --attention)",
        description="Compare variants of one model. " + COMPARE_NOTE,
    )
    _add_grid_options(p)
    p.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="the row ratios are to (default: the first value of the first axis)",
    )
    p.add_argument("--analysis-only", action="store_true", help="no timing: analysis of the full-size models only")
    p.add_argument("--depth", default="2", help="layers of the timed model, or 'full' (default: 2)")
    p.add_argument("--contexts", metavar="LIST", help=CONTEXTS_HELP)
    p.add_argument("--measure-up-to", metavar="N", help=MEASURE_UP_TO_HELP)
    p.add_argument(
        "--predict",
        metavar="GPU",
        help="the roofline GPU for --analysis-only context predictions and "
        "each run's estimate: h100-sxm (default for --contexts), h100-pcie, h200, a100-80gb, l4, rtx-4090",
    )
    _add_run_options(p)
    add_train_arguments(p)
    p.add_argument("--max-points", type=int, metavar="N", help=MAX_POINTS_HELP)
    p.add_argument(
        "--save", metavar="NAME", help="also write results-dir/NAME.jsonl, .csv, .md and plots (replacing them)"
    )
    p.add_argument("--results-dir", default="results", help="where --save writes (default: results/)")
    _add_output_options(p)
    p.set_defaults(func=run_compare)


def _add_grid_options(p: argparse.ArgumentParser) -> None:
    """What is compared: a base model and its axes, or checkpoints side by side."""
    p.add_argument("--arch", help="architecture name (see `zoo list`)")
    p.add_argument("--spec", dest="spec_file", metavar="FILE", help="a spec in YAML or JSON")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a spec field every variant shares, e.g. n_layers=4 (repeatable)",
    )
    p.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="an axis: a spec field (attention.kind=mha,gqa), a run option (batch_size=1,4) or arch=a,b "
        "(repeatable; the grid is their product)",
    )
    p.add_argument("--attention", metavar="KINDS", help="shorthand for --vary attention.kind=KINDS, e.g. mha,gqa,mqa")
    p.add_argument(
        "--weights",
        metavar="A,B,...",
        help="checkpoints side by side, one row each (folders, GGUF files, "
        "hub ids), measured whole: shorthand for --vary weights=A,B; no --arch or --spec",
    )
    p.add_argument(
        "--dequantize", action="store_true", help="load GGUF checkpoints' packed matrices as floats of --dtype"
    )


def _add_sweep_parser(subparsers: argparse._SubParsersAction) -> None:
    s = subparsers.add_parser(
        "sweep",
        help="run a TOML sweep file, one row per point, resumable",
        description="Run the grid of a TOML sweep file (see bench/sweeps/). Each point runs "
        "in its own process; its row is appended to results-dir/NAME.jsonl as it ends "
        "(a failure is a failed row), and NAME.csv, NAME.md and the plots are rendered from it.",
    )
    s.add_argument("file", help="a sweep file, e.g. bench/sweeps/attention.toml")
    s.add_argument("--resume", action="store_true", help="skip the points the results file already holds")
    s.add_argument("--overwrite", action="store_true", help="start again, discarding the results file's rows")
    s.add_argument("--results-dir", default="results", help="where rows are written (default: results/)")
    s.add_argument("--executor", default="local", help="local (default) or ray")
    s.add_argument(
        "--address",
        help="Ray cluster address for --executor ray (auto: the running cluster; default: a local instance)",
    )
    s.add_argument(
        "--jobs", type=int, default=1, help="local runs at a time (default: 1; parallel runs share the cores)"
    )
    s.add_argument(
        "--fresh-interpreter",
        action="store_true",
        help="start each local run in a new Python interpreter instead of forking it from a preloaded server",
    )
    s.add_argument("--timeout", type=float, help="seconds a run may take before it is killed and recorded as failed")
    s.add_argument("--contexts", metavar="LIST", help=CONTEXTS_HELP + " (replaces the file's contexts)")
    s.add_argument("--measure-up-to", metavar="N", help=MEASURE_UP_TO_HELP)
    s.add_argument("--max-points", type=int, metavar="N", help=MAX_POINTS_HELP + " (replaces the file's max_points)")
    _add_output_options(s)
    s.set_defaults(func=run_sweep)


def _add_output_options(p: argparse.ArgumentParser) -> None:
    add_format_arguments(p)
    p.add_argument(
        "--csv",
        dest="format",
        action="store_const",
        const="csv",
        help="same as --format csv: every column of every row (the table shows a selection)",
    )


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N, mps (default: auto)")
    p.add_argument("--dtype", help="default: bfloat16 on CUDA and for a GGUF held packed, float32 elsewhere")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--gen-len", type=int, default=16)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int)
    p.add_argument("--impl", help="token-mixer implementations: auto, reference or a kernel's name (default: auto)")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (default: 1)")


def _depth(text: str) -> int | None:
    from zoo.errors import BenchError

    if text == "full":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise BenchError(f"--depth: {text!r} is not a number of layers; allowed: a positive integer or full")
    return value


def run_compare(args: argparse.Namespace) -> int:
    from rich.console import Console

    from zoo.errors import SpecError
    from zoo.harness.sweep.run import compare

    if args.arch and args.spec_file:
        raise SpecError("give exactly one of --arch NAME or --spec FILE")
    vary = [*args.vary, *([f"weights={args.weights}"] if args.weights else [])]
    if not (args.arch or args.spec_file or any(v.split("=")[0].strip() in ("arch", "weights") for v in vary)):
        raise SpecError("give --arch NAME, --spec FILE, --weights A,B or --vary arch=A,B")
    spec = None
    if args.spec_file:
        from zoo.specs.model import ModelSpec

        spec = ModelSpec.from_file(args.spec_file)
    run = {
        k: v
        for k, v in {
            "device": args.device,
            "dtype": args.dtype,
            "batch_size": args.batch_size,
            "prompt_len": args.prompt_len,
            "gen_len": args.gen_len,
            "repeats": args.repeats,
            "threads": args.threads,
            "predict": args.predict,
            "impl": args.impl,
            "dequantize": args.dequantize or None,
        }.items()
        if v is not None
    }
    run.update(train_options(args))
    err = Console(stderr=True)
    with progress_bar(err, "compare") as update:
        frame = compare(
            spec if spec is not None else args.arch,
            vary,
            attention=args.attention,
            set=args.overrides,
            baseline=args.baseline,
            measure=not args.analysis_only,
            depth=_depth(args.depth),
            jobs=args.jobs,
            results_dir=args.results_dir if args.save else None,
            name=args.save or "compare",
            **({} if args.max_points is None else {"max_points": args.max_points}),
            progress=_row_progress(update),
            **_context_options(args),
            **run,
        )
    title = args.arch or args.spec_file or ("checkpoints" if args.weights else "architectures")
    print_frame(frame, f"zoo compare: {title}", args.format)
    if args.save:
        sys.stderr.write(f"zoo: saved {args.results_dir}/{args.save}.jsonl (rendered: .csv, .md, plots)\n")
    return _status(frame)


def run_sweep(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console

    from zoo.harness.sweep.grid import load_plan
    from zoo.harness.sweep.run import sweep

    options = _context_options(args)  # a bad --contexts fails before the file is read
    plan = load_plan(args.file, max_points=args.max_points)
    log = Path(args.results_dir) / f"{plan.name}.jsonl"
    measured = 0

    def count(update):  # type: ignore[no-untyped-def]
        report = _row_progress(update)

        def progress(row, done: int, total: int) -> None:  # type: ignore[no-untyped-def]
            nonlocal measured
            measured += 1
            report(row, done, total)

        return progress

    err = Console(stderr=True)
    with progress_bar(err, args.file) as update:
        frame = sweep(
            plan,
            results_dir=args.results_dir,
            resume=args.resume,
            overwrite=args.overwrite,
            executor=args.executor,
            jobs=args.jobs,
            timeout=args.timeout,
            address=args.address,
            isolation="interpreter" if args.fresh_interpreter else None,
            progress=count(update),
            **options,
        )
    print_frame(frame, f"zoo sweep: {args.file}", args.format)
    failed = int((frame["status"] == "failed").sum()) if len(frame) else 0
    earlier = len(frame) - measured
    if earlier and not measured:
        sys.stderr.write(
            f"zoo: nothing measured: every point of {args.file} was already in {log} "
            f"({_provenance(frame, log)}); --overwrite measures them again\n"
        )
    elif earlier:
        sys.stderr.write(
            f"zoo: measured {measured} points; {earlier} rows were already in {log} ({_provenance(frame, log)})\n"
        )
    sys.stderr.write(f"zoo: {len(frame)} rows ({failed} failed) in {log}\n")
    return _status(frame)


def _provenance(frame, log) -> str:  # type: ignore[no-untyped-def]
    """Where logged rows came from: when they finished and on which device."""
    from zoo.harness.sweep.results_log import read_log

    ids = set(frame["point_id"]) if len(frame) else set()
    rows = [r for r in read_log(log) if r.get("point_id") in ids] if log.exists() else []
    finished = sorted(str(r["finished_at"]) for r in rows if r.get("finished_at"))
    devices = sorted(
        {
            str((r.get("measurement") or {}).get("environment", {}).get("device_name"))
            for r in rows
            if r.get("measurement")
        }
    )
    parts = []
    if finished:
        parts.append(f"finished {finished[0]}" + (f" to {finished[-1]}" if finished[-1] != finished[0] else ""))
    if devices:
        parts.append("on " + ", ".join(devices))
    return ", ".join(parts) or "rows of an earlier run"


def _context_options(args: argparse.Namespace) -> dict:
    """--contexts and --measure-up-to parsed (a bad value is a BenchError naming the option)."""
    from zoo.harness.context_lengths import parse_context, parse_contexts

    options = {}
    if args.contexts is not None:
        options["contexts"] = parse_contexts(args.contexts, "--contexts")
    if args.measure_up_to is not None:
        options["measure_up_to"] = parse_context(args.measure_up_to, "--measure-up-to")
    return options


def _status(frame) -> int:  # type: ignore[no-untyped-def]
    """1 when every row failed (a script must not take that for success), else 0."""
    if len(frame) and bool((frame["status"] == "failed").all()):
        first = frame["error"].iloc[0]
        sys.stderr.write(f"zoo: every row failed; the first: {first}\n")
        return 1
    return 0


def _row_progress(update):  # type: ignore[no-untyped-def]
    """The bar's update as the sweep's per-row callback: each row's label and status as it ends."""

    def progress(row, done: int, total: int) -> None:  # type: ignore[no-untyped-def]
        update(f"{row['label']} {row['status']}", done, total)

    return progress

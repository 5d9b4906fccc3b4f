"""`zoo compare` (variants of one model side by side) and `zoo sweep FILE` (a TOML grid,
logged row by row, resumable)."""

from __future__ import annotations

import argparse

from zoo.cli.common import progress_bar

COMPARE_NOTE = (
    "Analysis columns (parameters, weight and KV bytes, FLOPs) are exact, of the full-size model. "
    "Timing columns come from `zoo bench`'s harness, each variant in its own process, on the "
    "model cut to --depth layers (default 2, so a CPU compares a 1B model in under a minute; "
    "--depth full for every layer) with the bench defaults (prompt 128, gen 16). "
    "--analysis-only skips the timing: instant."
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("compare", help="variants of a model side by side (--vary, --attention)",
                              description="Compare variants of one model. " + COMPARE_NOTE)
    p.add_argument("--arch", help="architecture name (see `zoo list`)")
    p.add_argument("--spec", dest="spec_file", metavar="FILE", help="a spec in YAML or JSON")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a spec field every variant shares, e.g. n_layers=4 (repeatable)")
    p.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2",
                   help="an axis: a spec field (attention.kind=mha,gqa), a run option (batch_size=1,4) or arch=a,b (repeatable; the grid is their product)")
    p.add_argument("--attention", metavar="KINDS", help="shorthand for --vary attention.kind=KINDS, e.g. mha,gqa,mqa")
    p.add_argument("--baseline", action="append", default=[], metavar="KEY=VALUE",
                   help="the row ratios are to (default: the first value of the first axis)")
    p.add_argument("--analysis-only", action="store_true", help="no timing: analysis of the full-size models only")
    p.add_argument("--depth", default="2", help="layers of the timed model, or 'full' (default: 2)")
    _add_run_options(p)
    p.add_argument("--save", metavar="NAME", help="also write results-dir/NAME.jsonl, .csv, .md and plots (replacing them)")
    p.add_argument("--results-dir", default="results", help="where --save writes (default: results/)")
    p.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    p.set_defaults(func=run_compare)

    s = subparsers.add_parser("sweep", help="run a TOML sweep file, one row per point, resumable",
                              description="Run the grid of a TOML sweep file (see bench/sweeps/). Each point runs "
                              "in its own process; its row is appended to results-dir/NAME.jsonl as it ends "
                              "(a failure is a failed row), and NAME.csv, NAME.md and the plots are rendered from it.")
    s.add_argument("file", help="a sweep file, e.g. bench/sweeps/attention.toml")
    s.add_argument("--resume", action="store_true", help="skip the points the results file already holds")
    s.add_argument("--overwrite", action="store_true", help="start again, discarding the results file's rows")
    s.add_argument("--results-dir", default="results", help="where rows are written (default: results/)")
    s.add_argument("--executor", default="local", help="local (default) or ray")
    s.add_argument("--address", help="Ray cluster address for --executor ray (auto: the running cluster; default: a local instance)")
    s.add_argument("--jobs", type=int, default=1, help="local runs at a time (default: 1; parallel runs share the cores)")
    s.add_argument("--fresh-interpreter", action="store_true",
                   help="start each local run in a new Python interpreter instead of forking it from a preloaded server")
    s.add_argument("--timeout", type=float, help="seconds a run may take before it is killed and recorded as failed")
    s.set_defaults(func=run_sweep)


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N, mps (default: auto)")
    p.add_argument("--dtype", help="default: bfloat16 on CUDA, float32 elsewhere")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--gen-len", type=int, default=16)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int)
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
    from zoo.harness.sweep import compare

    if bool(args.arch) == bool(args.spec_file):
        raise SpecError("give exactly one of --arch NAME or --spec FILE")
    spec = None
    if args.spec_file:
        from zoo.model_spec import ModelSpec

        spec = ModelSpec.from_file(args.spec_file)
    run = {k: v for k, v in {"device": args.device, "dtype": args.dtype, "batch_size": args.batch_size,
                             "prompt_len": args.prompt_len, "gen_len": args.gen_len, "repeats": args.repeats,
                             "threads": args.threads}.items() if v is not None}
    err = Console(stderr=True)
    with progress_bar(err, "compare") as update:
        frame = compare(
            spec if spec is not None else args.arch, args.vary, attention=args.attention, set=args.overrides,
            baseline=args.baseline, measure=not args.analysis_only, depth=_depth(args.depth), jobs=args.jobs,
            results_dir=args.results_dir if args.save else None, name=args.save or "compare",
            progress=_row_progress(update), **run,
        )
    if args.csv:
        print(frame.to_csv(index=False), end="")
    else:
        Console(width=250).print(frame_table(frame, "zoo compare: " + (args.arch or args.spec_file)))
    if args.save:
        err.print(f"saved {args.results_dir}/{args.save}.jsonl (rendered: .csv, .md, plots)")
    return 0


def run_sweep(args: argparse.Namespace) -> int:
    from rich.console import Console

    from zoo.harness.sweep import sweep

    err = Console(stderr=True)
    with progress_bar(err, args.file) as update:
        frame = sweep(
            args.file, results_dir=args.results_dir, resume=args.resume, overwrite=args.overwrite,
            executor=args.executor, jobs=args.jobs, timeout=args.timeout, address=args.address,
            isolation="interpreter" if args.fresh_interpreter else None, progress=_row_progress(update),
        )
    Console(width=250).print(frame_table(frame, f"zoo sweep: {args.file}"))
    failed = int((frame["status"] == "failed").sum()) if len(frame) else 0
    err.print(f"{len(frame)} rows ({failed} failed) in {args.results_dir}/")
    return 0


TABLE_COLUMNS = ("params_total", "kv_bytes_per_token", "state_bytes", "kv_bytes", "kv_bytes_vs_baseline", "measured_n_layers",
                 "prefill_tokens_per_s", "decode_tokens_per_s", "decode_tokens_per_s_vs_baseline", "decode_peak_bytes")


def frame_table(frame, title: str):  # type: ignore[no-untyped-def]
    """The comparison as a rich table: variant, figures, ratios; failed rows show their error."""
    from rich.table import Table

    from zoo.harness.report import format_cell

    columns = [c for c in TABLE_COLUMNS if c in frame.columns and frame[c].notna().any()]
    table = Table(title=title)
    table.add_column("variant")
    for column in columns:
        table.add_column(column.replace("_", " "), justify="right")
    table.add_column("status")
    for record in frame.to_dict("records"):
        cells = [format_cell(record[c].item() if hasattr(record[c], "item") else record[c]) for c in columns]
        status = record["status"] if record["status"] == "ok" else f"failed: {record['error']}"
        table.add_row(record["label"], *cells, status)
    return table


def _row_progress(update):  # type: ignore[no-untyped-def]
    """The bar's update as the sweep's per-row callback: each row's label and status as it ends."""

    def progress(row, done: int, total: int) -> None:  # type: ignore[no-untyped-def]
        update(f"{row['label']} {row['status']}", done, total)

    return progress

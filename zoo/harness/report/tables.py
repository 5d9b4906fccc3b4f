"""Result files: rows appended to ``results/<name>.jsonl``, re-rendered as CSV and Markdown.

The JSON-lines file is the record (one ``zoo.harness.row.Row`` per line, nested as measured,
every topology alike; lines logged before that schema are read as it), appended
one whole line at a time under the log's lock (``results_log``), so concurrent benches keep
every row; the CSV and Markdown files are renderings of all its rows, flattened, rewritten
(whole: temp file + ``os.replace``) under the same lock after each append. Every existing
row is checked before anything is written: a damaged log is one error and stays as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import get_args

from pydantic import ValidationError

from zoo.analysis.counts import Topology
from zoo.errors import BenchError
from zoo.files.atomic import write_text_atomic
from zoo.harness.report.cells import float_text, format_cell, values_key
from zoo.harness.report.contexts import render_contexts
from zoo.harness.report.plots import write_plots
from zoo.harness.row import Row, renamed_legacy
from zoo.harness.sweep.grid import ARCH_KEY
from zoo.harness.sweep.labels import format_value
from zoo.harness.sweep.results_log import append_line, check_folder_writable, end_tail, locked, read_locked, read_log

DEFAULT_RESULTS_DIR = Path("results")
DEFAULT_NAME = "bench"

# Columns of the Markdown rendering (the CSV has them all).
SUMMARY_COLUMNS = (
    "timestamp",
    "arch",
    "device_name",
    "threads",
    "dtype",
    "weights_dtype",
    "batch_size",
    "prompt_len",
    "gen_len",
    "compile_mode",
    "params_total",
    "weight_bytes",
    "kv_bytes",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "time_to_first_token_s",
    "itl_p50_s",
    "itl_p99_s",
    "prefill_peak_bytes",
    "decode_peak_bytes",
    "fidelity_kl",
    "predicted_gpu",
    "predicted_decode_tokens_per_s",
    "zoo_commit",
)
# Added after kv_bytes when the log holds encoder rows (empty in decoder rows: not measured there).
ENCODER_SUMMARY_COLUMNS = ("encoder_tokens_per_s", "self_kv_bytes", "cross_kv_bytes", "peak_bytes")


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole (see zoo.files.atomic)."""
    write_text_atomic(path, text)


def read_rows(path: Path) -> list[dict]:
    """The JSON rows of a results file (none if it does not exist); a damaged line is a
    ``BenchError`` naming it."""
    return read_log(Path(path))


def _measurements(rows: list[dict], path: Path) -> list[Row]:
    """Each logged row as a Row (a row logged before topologies were named is a decoder's,
    or names its ``family``: ``Row`` reads both)."""

    allowed = get_args(Topology)
    out = []
    for number, row in enumerate(rows, start=1):
        kind = row.get("topology", row.get("family", "decoder"))
        if kind not in allowed:
            raise BenchError(
                f"{path}: row {number} has topology {kind!r} (allowed: {', '.join(allowed)}); "
                "the results log is damaged (nothing was written)"
            )
        try:
            out.append(Row.model_validate(row))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise BenchError(
                f"{path}: row {number} is not a measurement ({where}: {first['msg']}); "
                "the results log is damaged (nothing was written)"
            ) from None
    return out


def check_results(results_dir: Path | str = DEFAULT_RESULTS_DIR, name: str = DEFAULT_NAME) -> None:
    """Fail now, before measuring, if the results cannot be appended: an unwritable folder or
    a damaged log (a ``BenchError`` naming the path or the line)."""
    jsonl = Path(results_dir) / f"{name}.jsonl"
    with locked(jsonl) as fd:
        _measurements(read_locked(fd, jsonl), jsonl)
    check_folder_writable(jsonl.parent)


def summary_columns(rows: Sequence[dict]) -> tuple[str, ...]:
    """The Markdown columns: SUMMARY_COLUMNS, with the topology and the encoder columns when
    the log holds an encoder or encoder-decoder row (a decoder-only log renders as before)."""
    if all(row["topology"] == "decoder" for row in rows):
        return SUMMARY_COLUMNS
    at = SUMMARY_COLUMNS.index("kv_bytes") + 1
    return ("timestamp", "arch", "topology", *SUMMARY_COLUMNS[2:at], *ENCODER_SUMMARY_COLUMNS, *SUMMARY_COLUMNS[at:])


def render_csv(measurements: Sequence[Row]) -> str:
    import pandas as pd

    return pd.DataFrame([m.flat() for m in measurements]).to_csv(index=False)


def render_markdown(measurements: Sequence[Row]) -> str:
    rows = [m.flat() for m in measurements]
    columns = summary_columns(rows)
    header = "| " + " | ".join(columns) + " |"
    rule = "|" + "---|" * len(columns)
    lines = [header, rule]
    for row in rows:
        cells = []
        for column in columns:
            value = row.get(column)
            cells.append("" if value is None else float_text(value) if isinstance(value, float) else str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def append_result(
    measurement: Row, results_dir: Path | str = DEFAULT_RESULTS_DIR, name: str = DEFAULT_NAME
) -> dict[str, Path]:
    """Append one row to ``<dir>/<name>.jsonl`` and rewrite ``<name>.csv`` and ``<name>.md``.

    One log holds rows of every topology. Returns the three paths. Rows already in the file
    stay as they were.
    """
    directory = Path(results_dir)
    jsonl, csv, md = (directory / f"{name}.{ext}" for ext in ("jsonl", "csv", "md"))
    with locked(jsonl) as fd:  # concurrent benches append in turn; none loses a row
        all_rows = _measurements(read_locked(fd, jsonl), jsonl) + [measurement]
        end_tail(fd)
        append_line(fd, measurement.model_dump_json())
        write_atomic(csv, render_csv(all_rows))
        write_atomic(md, render_markdown(all_rows))
    return {"jsonl": jsonl, "csv": csv, "md": md}


# ---- sweep tables ------------------------------------------------------------------------------
# Analysis of the full-size model, then the measurement (of the model cut to the plan's depth).
# A column a row's topology lacks is empty (an encoder's KV bytes: no cache), never 0.
ANALYSIS_COLUMNS = (
    "arch",
    "topology",
    "n_layers",
    "dtype",
    "weights_layout",
    "params_total",
    "params_active",
    "weight_bytes",
    "kv_bytes_per_token",
    "cross_kv_bytes_per_token",
    "state_bytes",
    "context_len",
    "memory_len",
    "kv_bytes",
    "flops_per_token",
    "encoder_flops",
)
TRAIN_RUN_COLUMNS = (
    "train_held_out_loss",
    "train_perplexity",
    "train_run_tokens",
    "train_run_tokens_per_s",
    "train_tokenizer",
    "train_run_start_step",
)  # phase train_run (--train-tokens)
# how the weights are held ("int4", "Q4_1/Q8_0 -> int4 x210, ..."): the analysis's weights_dtype, named
# apart from a weights_dtype axis
ANALYSIS_SOURCE = {"weights_layout": "weights_dtype"}
MEASURED_COLUMNS = (
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "time_to_first_token_s",
    "ttft_min_s",
    "ttft_max_s",
    "itl_p50_s",
    "itl_p90_s",
    "itl_p99_s",
    "itl_steps",
    "prefill_peak_bytes",
    "decode_peak_bytes",
    "fidelity_max_logit_error",
    "fidelity_kl",
    "eval_perplexity",
    "encoder_tokens_per_s",
    "encoder_time_s",
    "peak_bytes",
    "self_kv_bytes",
    "cross_kv_bytes",
    "train_tokens_per_s",
    *TRAIN_RUN_COLUMNS,
)
MEASURED_CONTEXT = ("device_name", "threads")
RATIO_COLUMNS = (
    "params_total",
    "kv_bytes_per_token",
    "kv_bytes",
    "weight_bytes",
    "decode_tokens_per_s",
    "prefill_tokens_per_s",
    "decode_peak_bytes",
    "encoder_tokens_per_s",
)
SWEEP_MARKDOWN = (
    "topology",
    "params_total",
    "kv_bytes_per_token",
    "cross_kv_bytes_per_token",
    "state_bytes",
    "kv_bytes",
    "measured_n_layers",
    "encoder_tokens_per_s",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "itl_p50_s",
    "decode_peak_bytes",
    "peak_bytes",
    "kv_bytes_vs_baseline",
    "params_total_vs_baseline",
    "encoder_tokens_per_s_vs_baseline",
    "decode_tokens_per_s_vs_baseline",
    "train_held_out_loss",
    "train_perplexity",
    "train_run_tokens_per_s",
    "train_tokenizer",
    "status",
    "error",
)


def sweep_table(rows, keys: Sequence[str], baseline: dict):  # type: ignore[no-untyped-def]
    """A DataFrame, one row per point in plan order: its axis values, status and error, the
    analysis, the measurement, and ``<column>_vs_baseline`` ratios to the row that has the
    baseline's values in place of its own (``baseline`` may name only some axes)."""
    import pandas as pd

    rows = sorted(rows, key=lambda r: r.get("index", 0))
    by_values = {values_key(r["values"]): r for r in rows if r.get("status") == "ok"}
    records = []
    for row in rows:
        record: dict = {"point_id": row["point_id"], "label": row["label"]}
        for key in keys:
            value = row["values"].get(key)
            record[key] = format_value(value) if isinstance(value, dict) else value
        record["status"], record["error"] = row["status"], row.get("error")
        analysis = renamed_legacy(row.get("analysis") or {})  # logs of older versions name columns as they did
        measurement = renamed_legacy(row.get("measurement") or {})
        environment = measurement.get("environment") or {}
        for column in ANALYSIS_COLUMNS:
            record[column] = analysis.get(ANALYSIS_SOURCE.get(column, column))
        record["measured_n_layers"] = row.get("measured_n_layers")
        for column in MEASURED_COLUMNS:
            record[column] = measurement.get(column)
        for column in MEASURED_CONTEXT:
            record[column] = environment.get(column)
        reference = by_values.get(values_key({**row["values"], **baseline}))
        for column in RATIO_COLUMNS:
            mine, theirs = record.get(column), _column_of(reference, column)
            record[f"{column}_vs_baseline"] = mine / theirs if mine is not None and theirs else None
        records.append(record)
    return integer_columns(pd.DataFrame.from_records(records), records)


def integer_columns(frame, records: Sequence[dict]):  # type: ignore[no-untyped-def]
    """Columns whose values are all integers (or missing) as pandas' nullable Int64, so a
    failed row's gap does not turn 28 layers into 28.0 in --json and --csv."""
    for column in frame.columns:
        values = [r.get(column) for r in records if r.get(column) is not None]
        if (
            values
            and all(isinstance(v, int) and not isinstance(v, bool) for v in values)
            and max(map(abs, values)) < 2**63
        ):
            frame[column] = frame[column].astype("Int64")
    return frame


def _column_of(row, column: str):  # type: ignore[no-untyped-def]
    if row is None:
        return None
    if column in ANALYSIS_COLUMNS:
        return renamed_legacy(row.get("analysis") or {}).get(ANALYSIS_SOURCE.get(column, column))
    return renamed_legacy(row.get("measurement") or {}).get(column)


def sweep_markdown(frame, keys: Sequence[str]) -> str:  # type: ignore[no-untyped-def]
    columns = [*keys, *(c for c in SWEEP_MARKDOWN if c in frame.columns)]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for record in frame.to_dict("records"):
        lines.append("| " + " | ".join(format_cell(record.get(c)) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def render_sweep(frame, rows, stem: Path) -> dict[str, Path]:  # type: ignore[no-untyped-def]
    """``<stem>.csv``, ``<stem>.md`` and the plots the rows allow, each written whole."""

    keys = [
        c
        for c in frame.columns
        if c not in ("point_id", "label", "status", "error")
        and c not in ANALYSIS_COLUMNS
        and c not in MEASURED_COLUMNS
        and c not in MEASURED_CONTEXT
        and c != "measured_n_layers"
        and not c.endswith("_vs_baseline")
    ]

    if ARCH_KEY in frame.columns and any(ARCH_KEY in r.get("values", {}) for r in rows):
        keys.insert(0, ARCH_KEY)  # an axis of its own, though also an analysis column
    paths = {ext: stem.with_name(f"{stem.name}.{ext}") for ext in ("csv", "md")}  # names hold dots: 3.2-1b
    write_atomic(paths["csv"], frame.to_csv(index=False))
    write_atomic(paths["md"], sweep_markdown(frame, keys))
    paths.update(write_plots(frame, rows, keys, stem))

    paths.update(render_contexts(frame, stem))  # --contexts: <stem>-contexts.csv, .md and plots
    return paths

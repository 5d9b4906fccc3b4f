"""How `zoo compare` and `zoo sweep` print a comparison: the variants' table (a selection of
columns), the per-context table and crossovers, or every column as JSON or CSV."""

from __future__ import annotations

import sys

from zoo.cli.compare_train import TRAIN_COLUMNS
from zoo.cli.output import TableData, print_json, print_table


def print_frame(frame, title: str, fmt: str) -> None:  # type: ignore[no-untyped-def]
    """The comparison in the chosen format: json and csv carry every column, table and md a selection.

    With --contexts (``frame.attrs["contexts"]``): json adds ``contexts`` (one record per variant
    and context) and ``crossovers``; csv is the per-context table (every column); table and md
    print the variants' table, then the per-context one and a line per crossover.
    """
    contexts = frame.attrs.get("contexts")
    if fmt == "json":
        import json

        document = {"rows": json.loads(frame.to_json(orient="records"))}
        if contexts is not None:
            document["contexts"] = contexts
            document["crossovers"] = frame.attrs.get("crossovers", [])
        print_json(document)
    elif fmt == "csv":
        from zoo.harness.contexts import as_frame

        sys.stdout.write((frame if contexts is None else as_frame(contexts)).to_csv(index=False))
    else:
        print_table(frame_table(frame, title), fmt)
        if contexts is not None:
            from zoo.harness.contexts import as_frame
            from zoo.harness.report.contexts import crossover_lines

            sys.stdout.write("\n")
            print_table(context_table(as_frame(contexts), title + ", by context"), fmt)
            lines = crossover_lines(frame.attrs.get("crossovers", []))
            sys.stdout.write("".join(f"\n{line}" for line in lines) + ("\n" if lines else ""))


TABLE_COLUMNS = (
    "topology",
    "weights_layout",
    "params_total",
    "kv_bytes_per_token",
    "cross_kv_bytes_per_token",
    "state_bytes",
    "kv_bytes",
    "kv_bytes_vs_baseline",
    "measured_n_layers",
    "encoder_tokens_per_s",
    "encoder_tokens_per_s_vs_baseline",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "decode_tokens_per_s_vs_baseline",
    "decode_peak_bytes",
    "peak_bytes",
    "weight_bytes",
    "fidelity_max_logit_error",
    "fidelity_kl",
    "eval_perplexity",
    *TRAIN_COLUMNS,
)
SHOWN_WHEN_VARYING = ("weight_bytes", "topology", "weights_layout")  # same in every row (most comparisons): left out
KV_COLUMNS = ("kv_bytes_per_token", "cross_kv_bytes_per_token", "kv_bytes")


def frame_table(frame, title: str) -> TableData:  # type: ignore[no-untyped-def]
    """The comparison as a table: variant, figures, ratios; failed rows show their error.

    KV bytes depend on the dtype: its name is in those columns' headers when every row has
    the same, else a dtype column follows the variant.
    """
    columns = [
        c
        for c in TABLE_COLUMNS
        if c in frame.columns and frame[c].notna().any() and (c not in SHOWN_WHEN_VARYING or frame[c].nunique() > 1)
    ]
    dtypes = sorted({str(d) for d in frame["dtype"].dropna()}) if "dtype" in frame.columns else []
    one_dtype = dtypes[0] if len(dtypes) == 1 else None
    headers = ["variant", *(["dtype"] if len(dtypes) > 1 else [])]
    for column in columns:
        header = column.replace("_", " ")
        headers.append(f"{header} ({one_dtype})" if one_dtype and column in KV_COLUMNS else header)
    headers.append("status")
    rows = []
    for record in frame.to_dict("records"):
        cells = [_py(record[c]) for c in columns]
        status = record["status"] if record["status"] == "ok" else f"failed: {record['error']}"
        rows.append([record["label"], *([record.get("dtype")] if len(dtypes) > 1 else []), *cells, status])
    return TableData(title, headers, rows, right=set(headers[1 + (len(dtypes) > 1) : -1]))


def context_table(contexts, title: str) -> TableData:  # type: ignore[no-untyped-def]
    """The per-context frame as a table (columns: ``zoo.harness.report.contexts.table_rows``)."""
    from zoo.harness.report.contexts import NUMERIC_HEADERS, table_rows

    headers, rows = table_rows(contexts)
    return TableData(title, headers, rows, right={h for h in headers if h in NUMERIC_HEADERS})


def _py(value):  # type: ignore[no-untyped-def]
    """numpy scalars as Python numbers (so integers print as integers)."""
    return value.item() if hasattr(value, "item") else value

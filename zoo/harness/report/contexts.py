"""The per-context results (``zoo.harness.contexts``) as people read them: the command's
table (one row per variant and context), the saved ``-contexts.csv`` / ``-contexts.md`` with
one ``crossover:`` line per crossing, and the context plots."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoo.files.atomic import write_text_atomic
from zoo.harness.context_lengths import format_context
from zoo.harness.contexts import as_frame
from zoo.harness.report.cells import format_cell, plain
from zoo.harness.report.context_plots import write_context_plots

if TYPE_CHECKING:
    import pandas as pd

TABLE_HEADERS = (
    "variant",
    "context",
    "memory MiB",
    "cache MiB",
    "memory vs baseline",
    "decode tokens/s",
    "decode",
    "decode vs baseline",
    "decode basis",
    "note",
)
NUMERIC_HEADERS = frozenset(
    {"context", "memory MiB", "cache MiB", "memory vs baseline", "decode tokens/s", "decode vs baseline"}
)


def table_rows(frame: pd.DataFrame) -> tuple[list[str], list[list[Any]]]:
    """Headers and cells, one row per (variant, context): memory and cache in MiB (exact bytes
    in JSON/CSV), decode tokens/s with its source (measured/predicted) and basis, ratios to the
    baseline; the note column only when a row has a note."""
    rows = []
    for r in frame.to_dict("records"):
        rows.append(
            [
                r["label"],
                format_context(int(r["context"])),
                _mib(r["memory_bytes"]),
                _mib(r["cache_bytes"]),
                plain(r["memory_bytes_vs_baseline"]),
                _rate(r["decode_tokens_per_s"]),
                r["decode_source"],
                plain(r["decode_tokens_per_s_vs_baseline"]),
                r["decode_basis"],
                plain(r["note"]),
            ]
        )
    headers = list(TABLE_HEADERS)
    if not any(row[-1] for row in rows):
        headers, rows = headers[:-1], [row[:-1] for row in rows]
    return headers, rows


def context_markdown(frame: pd.DataFrame, items: Sequence[Mapping[str, Any]]) -> str:
    """The per-context table as Markdown, then one line per crossover."""
    headers, rows = table_rows(frame)
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---:" if h in NUMERIC_HEADERS else "---" for h in headers) + "|",
    ]
    lines += ["| " + " | ".join(format_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n" + "".join(f"\n{line}\n" for line in crossover_lines(items))


def render_contexts(frame: pd.DataFrame, stem: Path) -> dict[str, Path]:
    """``<stem>-contexts.csv``, ``.md`` and the two context plots, each written whole."""

    records = frame.attrs.get("contexts")
    if not records:
        return {}
    contexts = as_frame(records)
    paths = {
        "contexts_csv": stem.with_name(f"{stem.name}-contexts.csv"),
        "contexts_md": stem.with_name(f"{stem.name}-contexts.md"),
    }
    items = frame.attrs.get("crossovers", [])
    write_text_atomic(paths["contexts_csv"], contexts.to_csv(index=False))
    write_text_atomic(paths["contexts_md"], context_markdown(contexts, items))
    paths.update(write_context_plots(contexts, items, stem))
    return paths


def _mib(value: Any) -> float | int | None:
    """MiB to 0.1 below 100, whole above (printed with thousands separators)."""
    value = plain(value)
    if value is None:
        return None
    mib = float(value) / 2**20
    return round(mib, 1) if mib < 100 else round(mib)


def _rate(value: Any) -> float | int | None:
    """Tokens/s whole from 100 up (thousands separators, no exponent), else to 4 figures."""
    value = plain(value)
    return None if value is None else round(value) if value >= 100 else value


def crossover_lines(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """``crossover: X overtakes B in decode tokens/s at 11,023 tokens (between 8k and 16k)``,
    or ``no crossover: X is better than B in memory at every context from 4k to 128k``."""
    lines = []
    for item in items:
        lo, hi = (format_context(n) for n in item["between"])
        against = item["baseline"] or "the baseline"
        if item["context"] is None:
            side = "better than" if item["after"] == "better" else "worse than"
            lines.append(
                f"no crossover: {item['variant']} is {side} {against} in {item['measure']} "
                f"at every context from {lo} to {hi}"
            )
            continue
        verb = "overtakes" if item["after"] == "better" else "falls behind"
        lines.append(
            f"crossover: {item['variant']} {verb} {against} in {item['measure']} at "
            f"{item['context']:,.0f} tokens (between {lo} and {hi})"
        )
    return lines

"""How commands print their results: one table type, four renderings, nothing ever cut.

Every command that prints a table builds a :class:`TableData` (a title, columns, rows of
cell text) and hands it to :func:`print_table` with the format the user chose:

- ``table`` (default): on a terminal a boxed table when it fits the terminal's width, else
  one block of ``column: value`` lines per row; on a pipe or a file, plain aligned columns,
  one line per row, as wide as the content needs. No cell is ever shortened with an ellipsis
  at any width, so ``zoo list | grep NAME`` finds NAME.
- ``csv`` and ``md``: the same cells as CSV or a Markdown table.
- ``json`` is not rendered here: each command prints its own single JSON document.

``--json`` is an alias of ``--format json`` on every such command.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from zoo.harness.report.cells import float_text

TABLE_FORMATS = ("table", "json", "csv", "md")
GAP = "  "


@dataclass
class TableData:
    """A table: cells are text or numbers (integers print with thousands separators, floats as
    ``zoo.harness.report.cells.float_text``, None blank; CSV keeps numbers as they are). ``right`` names the
    columns aligned right; by default, those whose cells are all numbers."""

    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    right: set[str] | None = None

    def text_rows(self, fmt: str = "table") -> list[list[str]]:
        return [[cell_text(v, raw=fmt == "csv") for v in row] for row in self.rows]

    def right_columns(self) -> set[str]:
        if self.right is not None:
            return self.right
        numeric = set()
        for i, column in enumerate(self.columns):
            values = [row[i] for row in self.rows if row[i] is not None]
            if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                numeric.add(column)
        return numeric


def cell_text(value: Any, raw: bool = False) -> str:
    """A cell as text; ``raw`` (CSV) keeps numbers machine-readable."""
    import math

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if raw:
        return str(value)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) >= 1000):
        return f"{int(value):,}"
    if isinstance(value, float):
        return float_text(value)
    return str(value)


def add_format_arguments(
    parser: argparse.ArgumentParser, formats: Sequence[str] = TABLE_FORMATS, default: str = "table"
) -> None:
    """``--format F`` and its alias ``--json`` (= ``--format json``)."""
    note = "; a table is never cut, and on a pipe it is plain columns" if "table" in formats else ""
    parser.add_argument(
        "--format", choices=tuple(formats), default=default, help=f"{', '.join(formats)} (default: {default}){note}"
    )
    parser.add_argument(
        "--json",
        dest="format",
        action="store_const",
        const="json",
        help="same as --format json: one JSON document on stdout",
    )


def print_json(document: Any, out: TextIO | None = None) -> None:
    """One JSON document on stdout (indented, a final newline)."""
    (out or sys.stdout).write(json.dumps(document, indent=2, default=str) + "\n")


def print_table(table: TableData, fmt: str = "table", out: TextIO | None = None) -> None:
    """Render ``table`` as ``fmt`` (table, csv or md) on ``out`` (stdout)."""
    out = out or sys.stdout
    if fmt == "csv":
        out.write(render_csv(table))
    elif fmt == "md":
        out.write(render_markdown(table))
    elif _is_terminal(out):
        _print_terminal(table, out)
    else:
        out.write(render_plain(table))
    out.flush()


def render_csv(table: TableData) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows(table.text_rows("csv"))
    return buffer.getvalue()


def render_markdown(table: TableData) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", "<br>")

    right = table.right_columns()
    lines = [
        "| " + " | ".join(cell(c) for c in table.columns) + " |",
        "|" + "|".join("---:" if c in right else "---" for c in table.columns) + "|",
    ]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.text_rows()]
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    return "; ".join(part for part in text.splitlines() if part) if "\n" in text else text


def render_plain(table: TableData) -> str:
    """Aligned columns separated by two spaces, one line per row, no width limit."""
    rows = [[_one_line(v) for v in row] for row in table.text_rows()]
    right = table.right_columns()
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(table.columns)]
    last = len(table.columns) - 1

    def line(cells: Sequence[str]) -> str:
        parts = []
        for i, (text, width) in enumerate(zip(cells, widths)):
            parts.append(text.rjust(width) if table.columns[i] in right else text if i == last else text.ljust(width))
        return GAP.join(parts).rstrip()

    return "\n".join([line(table.columns), *(line(r) for r in rows)]) + "\n"


def render_records(table: TableData) -> str:
    """One block of ``column: value`` lines per row: for terminals too narrow for the table."""
    label = max(len(c) for c in table.columns)
    blocks = []
    for row in table.text_rows():
        lines = []
        for column, value in zip(table.columns, row):
            first, *rest = value.splitlines() or [""]
            lines.append(f"{column.rjust(label)}: {first}")
            lines += [" " * (label + 2) + more for more in rest]
        blocks.append("\n".join(lines))
    return (table.title + "\n\n" if table.title else "") + "\n\n".join(blocks) + "\n"


def _is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def _print_terminal(table: TableData, out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    width = shutil.get_terminal_size((80, 24)).columns
    rows, right = table.text_rows(), table.right_columns()
    needed = [
        max([len(c), *(len(line) for r in rows for line in r[i].splitlines() or [""])])
        for i, c in enumerate(table.columns)
    ]
    if sum(needed) + 3 * len(needed) + 1 > width:  # cells + borders and padding: would not fit
        out.write(render_records(table))
        return
    rich_table = Table(title=table.title or None)
    for column in table.columns:
        rich_table.add_column(column, justify="right" if column in right else "left", overflow="fold")
    for row in rows:
        rich_table.add_row(*row)
    Console(file=out, width=width).print(rich_table)

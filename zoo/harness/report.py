"""Result files: rows appended to ``results/<name>.jsonl``, re-rendered as CSV and Markdown.

The JSON-lines file is the record (one Measurement per line, nested as measured); the CSV
and Markdown files are renderings of all its rows, flattened, rewritten after each append.
Every file is written whole to a temporary file in the same directory and moved into place
with ``os.replace``, so an interrupted write leaves the previous version, never half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from zoo.harness.run import Measurement

DEFAULT_RESULTS_DIR = Path("results")
DEFAULT_NAME = "bench"

# Columns of the Markdown rendering (the CSV has them all).
SUMMARY_COLUMNS = (
    "timestamp", "arch", "device_name", "threads", "dtype", "batch_size", "prompt_len", "gen_len", "compile_mode",
    "params_total", "kv_bytes", "prefill_tokens_per_s", "decode_tokens_per_s", "time_to_first_token_s",
    "prefill_peak_bytes", "decode_peak_bytes", "predicted_gpu", "predicted_decode_tokens_per_s", "zoo_commit",
)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole: temp file in the same directory, then os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_rows(path: Path) -> list[dict]:
    """The JSON rows of a results file (none if it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def render_csv(measurements: Sequence[Measurement]) -> str:
    import pandas as pd

    return pd.DataFrame([m.flat() for m in measurements]).to_csv(index=False)


def render_markdown(measurements: Sequence[Measurement]) -> str:
    rows = [m.flat() for m in measurements]
    header = "| " + " | ".join(SUMMARY_COLUMNS) + " |"
    rule = "|" + "---|" * len(SUMMARY_COLUMNS)
    lines = [header, rule]
    for row in rows:
        cells = []
        for column in SUMMARY_COLUMNS:
            value = row.get(column)
            cells.append("" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def append_result(measurement: Measurement, results_dir: Path | str = DEFAULT_RESULTS_DIR, name: str = DEFAULT_NAME) -> dict[str, Path]:
    """Append one row to ``<dir>/<name>.jsonl`` and rewrite ``<name>.csv`` and ``<name>.md``.

    Returns the three paths. Rows already in the file stay as they were.
    """
    directory = Path(results_dir)
    jsonl, csv, md = (directory / f"{name}.{ext}" for ext in ("jsonl", "csv", "md"))
    existing = jsonl.read_text(encoding="utf-8") if jsonl.exists() else ""
    if existing and not existing.endswith("\n"):
        existing += "\n"
    write_atomic(jsonl, existing + measurement.model_dump_json() + "\n")
    all_rows = [Measurement.model_validate(row) for row in read_rows(jsonl)]
    write_atomic(csv, render_csv(all_rows))
    write_atomic(md, render_markdown(all_rows))
    return {"jsonl": jsonl, "csv": csv, "md": md}

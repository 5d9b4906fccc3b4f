"""The sweep's record: a JSON-lines file, one whole row appended as each point ends.

Each row is written with one ``write`` on a file opened ``O_APPEND``, then flushed and
fsynced, so a sweep killed at any moment (Ctrl-C, kill -9, a power cut after the fsync)
keeps every row that finished. At worst the last line is torn (the kill landed inside the
write); ``open_log`` cuts such a tail off before appending again, and reading ignores it.
Only the sweep's driver process writes, so no two rows ever race.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def read_log(path: Path) -> list[dict[str, Any]]:
    """Whole rows of the log, in order; a torn (unparseable, unterminated) last line is ignored."""
    if not path.exists():
        return []
    rows = []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines) - 1:  # the unterminated tail of an interrupted write
                continue
            from zoo.errors import BenchError

            raise BenchError(f"{path}: line {number + 1} is not a JSON row; the results log is damaged") from None
    return rows


def cut_torn_tail(path: Path) -> None:
    """Drop an unterminated last line so the next append starts on a line of its own."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
        with open(path, "r+b") as handle:
            handle.truncate(keep)
            handle.flush()
            os.fsync(handle.fileno())


def append_row(path: Path, row: Mapping[str, Any]) -> None:
    """Append one row as one line: a single write on an O_APPEND descriptor, then fsync."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(row, default=str) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, line)
        while written < len(line):  # a short write (rare on regular files): finish the line
            written += os.write(fd, line[written:])
        os.fsync(fd)
    finally:
        os.close(fd)

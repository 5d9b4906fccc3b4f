"""Results logs (``bench.jsonl``, a sweep's ``<name>.jsonl``): whole rows appended under a lock.

Each row is written with one ``write`` on a descriptor opened ``O_APPEND``, then fsynced, so
a writer killed at any moment (Ctrl-C, kill -9, a power cut after the fsync) keeps every row
that finished. At worst the last line is torn (the kill landed inside the write). A row is
"done" only when its whole JSON object is there: an unterminated last line that parses is a
complete row (its newline is added before the next append), one that does not parse is a
torn tail, cut before appending and ignored when reading.

Writers take an exclusive ``flock`` on the log itself (``locked``): ``zoo bench`` for the
read-check-append-render of one row, so concurrent benches never lose a row; a sweep for its
whole run (``locked(..., wait=False)``), so a second sweep on the same log is refused at once
instead of running every point again. A damaged line (not UTF-8, not a JSON object) is one
``BenchError`` naming the line, raised before anything is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from zoo.errors import BenchError
from zoo.files.safe_io import read_bytes

MAX_LOG_BYTES = 1 << 30  # a results log larger than this is refused rather than read (about a million rows)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, single writer assumed
    fcntl = None  # type: ignore[assignment]


@contextlib.contextmanager
def locked(path: Path, *, wait: bool = True) -> Iterator[int]:
    """The log opened for appending (created if absent) and locked exclusively.

    Raises a ``BenchError`` naming the path when it cannot be created or written (checked
    here, before any measurement), or, with ``wait=False``, when another process holds it.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(
            path,
            os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0),
            0o666,
        )
    except OSError as exc:
        raise BenchError(
            f"{path}: cannot write results there ({exc.strerror or exc}); choose another --results-dir"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a link to /dev/zero would be read forever
        os.close(fd)
        raise BenchError(f"{path}: the results log is not a regular file; choose another name or --results-dir")
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                raise BenchError(
                    f"{path}: another zoo process is writing this results log; "
                    "wait for it to finish or use another name or --results-dir"
                ) from None
        yield fd
    finally:
        os.close(fd)  # closing releases the lock


def check_folder_writable(folder: Path) -> None:
    """Renderings are written whole beside the log (temp file + rename): an unwritable folder
    is found here, before any measurement, not after."""

    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".zoo-probe-"):
            pass
    except OSError as exc:
        raise BenchError(
            f"{folder}: cannot write results there ({exc.strerror or exc}); choose another --results-dir"
        ) from None


def _read_fd(fd: int) -> bytes:
    if os.fstat(fd).st_size > MAX_LOG_BYTES:
        raise BenchError(f"the results log is larger than zoo reads (at most {MAX_LOG_BYTES:,} bytes); start a new one")
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def parse_rows(data: bytes, path: Path) -> list[dict[str, Any]]:
    """Whole rows in order; a torn (unparseable, unterminated) last line is ignored; any
    other bad line is a ``BenchError`` naming it."""
    lines = data.split(b"\n")
    rows = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        last = number == len(lines)  # no newline after it
        try:
            row = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            if last:
                continue
            raise BenchError(
                f"{path}: line {number} is not UTF-8; the results log is damaged (nothing was written)"
            ) from None
        except json.JSONDecodeError:
            if last:
                continue  # the unterminated tail of an interrupted write
            raise BenchError(
                f"{path}: line {number} is not a JSON row; the results log is damaged (nothing was written)"
            ) from None
        except RecursionError:
            raise BenchError(f"{path}: line {number} is nested too deep; the results log is damaged") from None
        if not isinstance(row, dict):
            raise BenchError(
                f"{path}: line {number} is a JSON {type(row).__name__}, not a row object; "
                "the results log is damaged (nothing was written)"
            )
        rows.append(row)
    return rows


def read_log(path: Path) -> list[dict[str, Any]]:
    """Whole rows of the log (none if it does not exist); see ``parse_rows``."""
    path = Path(path)
    if not path.exists():
        return []

    return parse_rows(read_bytes(path, BenchError, "results log", limit=MAX_LOG_BYTES), path)


def read_locked(fd: int, path: Path) -> list[dict[str, Any]]:
    """The rows of a log already open (and locked) as ``fd``."""
    return parse_rows(_read_fd(fd), path)


def end_tail(fd: int) -> None:
    """Make the next append start on a line of its own: a complete unterminated last row gets
    its newline; a torn one (not a whole JSON object) is cut off."""
    data = _read_fd(fd)
    if not data or data.endswith(b"\n"):
        return
    keep = data.rfind(b"\n") + 1
    try:
        complete = isinstance(json.loads(data[keep:].decode("utf-8")), dict)
    except (UnicodeDecodeError, ValueError, RecursionError):
        complete = False
    if complete:
        os.write(fd, b"\n")
    else:
        os.ftruncate(fd, keep)
    os.fsync(fd)


def append_line(fd: int, row: Mapping[str, Any] | str) -> None:
    """Append one row as one line: a single write on the O_APPEND descriptor, then fsync."""
    text = row if isinstance(row, str) else json.dumps(row, default=str)
    line = (text + "\n").encode("utf-8")
    written = os.write(fd, line)
    while written < len(line):  # a short write (rare on regular files): finish the line
        written += os.write(fd, line[written:])
    os.fsync(fd)


def append_row(path: Path, row: Mapping[str, Any]) -> None:
    """Append one row to ``path`` under its lock (for writers that do not hold it already)."""
    with locked(Path(path)) as fd:
        end_tail(fd)
        append_line(fd, row)


def cut_torn_tail(path: Path) -> None:
    """``end_tail`` for a path (kept for callers outside a lock)."""
    if Path(path).exists():
        with locked(Path(path)) as fd:
            end_tail(fd)

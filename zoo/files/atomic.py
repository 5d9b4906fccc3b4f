"""Files written whole or not at all: a temp file in the same folder, then ``os.replace``.

An interrupted write leaves the previous version (or nothing), never half a file. One
implementation for results, plots, configs and checkpoints. The file gets the mode a plain
``open`` would give it (0666 less the umask: 0644 under umask 022), not mkstemp's 0600.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path


def current_umask() -> int:
    """The process's umask, read without changing it where Linux tells it (/proc), else by
    setting and restoring it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temp path to write; on success it replaces ``path``, on failure it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600; a new file follows the umask
    except (AttributeError, OSError):  # pragma: no cover - no fchmod (Windows)
        pass
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


@contextlib.contextmanager
def staged_folder(dest: str | Path, prefix: str) -> Iterator[Path]:
    """A hidden folder beside ``dest`` to write a set of files into; when the block ends
    normally every file in it replaces its namesake in ``dest`` (``publish``), and on any
    failure or interruption the folder is removed and ``dest`` is as it was: a set of files
    (a results log, its tables and plots) is replaced whole, or not at all."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(dir=dest, prefix=f".{prefix}.staging-"))
    try:
        yield stage
        publish(stage, dest)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def publish(stage: Path, dest: Path) -> None:
    """Move every file of ``stage`` into ``dest`` (same file system: renames), with SIGINT
    and SIGTERM held back meanwhile so Ctrl-C cannot stop the set half replaced."""
    files = sorted(p for p in stage.rglob("*") if p.is_file())
    held = {signal.SIGINT, signal.SIGTERM}
    main = threading.current_thread() is threading.main_thread() and hasattr(signal, "pthread_sigmask")
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held) if main else None
    try:
        for path in files:
            target = dest / path.relative_to(stage)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

"""Run the installed `zoo` command the way a shell pipeline or a script does: stdout and
stderr are pipes (never a terminal), and the raw bytes are what the tests look at."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def zoo_command() -> list[str]:
    """The console script installed beside this interpreter (``python -m zoo`` if there is none)."""
    script = Path(sys.executable).with_name("zoo")
    if script.exists():
        return [str(script)]
    found = shutil.which("zoo")
    return [found] if found else [sys.executable, "-m", "zoo"]


def environment(site: Path | None = None, **env: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("ZOO_PLUGINS", "COLUMNS", "LINES")}
    if site is not None:
        environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), environ.get("PYTHONPATH", "")) if p)
    environ.update(env)
    return environ


def zoo(
    *args: str, site: Path | None = None, cwd: Path | None = None, timeout: float = 180, **env: str
) -> subprocess.CompletedProcess[str]:
    """``zoo ARGS`` with piped stdout and stderr."""
    return subprocess.run(
        [*zoo_command(), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=environment(site, **env),
        cwd=cwd or REPO,
        timeout=timeout,
    )


def one_error_line(result: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit 2, nothing on stdout, exactly one `zoo: error:` line naming ``words`` on stderr."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stdout == "", result.stdout
    assert result.stderr.startswith("zoo: error:") and result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)


def zoo_on_a_terminal(*args: str, columns: int = 80, timeout: float = 180, **env: str) -> tuple[int, str]:
    """``zoo ARGS`` with stdout and stderr on a pseudo-terminal ``columns`` wide: (status, output)."""
    import fcntl
    import pty
    import struct
    import termios
    import time

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    environ = environment(**env)
    environ.pop("COLUMNS", None)
    environ["TERM"] = "xterm-256color"
    process = subprocess.Popen(
        [*zoo_command(), *args], stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=environ, cwd=REPO
    )
    os.close(follower)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    return process.wait(timeout=30), b"".join(chunks).decode(errors="replace")

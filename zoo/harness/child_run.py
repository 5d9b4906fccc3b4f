"""A benchmark in a fresh Python process, spoken to in JSON: the parent writes one request
on the child's stdin and reads the child's last stdout line as the reply (the one transport:
``zoo.harness.run.measure_in_subprocess``, which sweeps with ``isolation="interpreter"`` use).

A ZooError in the child comes back as ``{"error": message}`` and is raised here as a
BenchError with that message; a crash (out of memory, a signal) is a BenchError with the tail
of the child's stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

from zoo.errors import BenchError, ZooError


def run_child(module: str, request: Mapping[str, Any], timeout: float | None = None) -> dict[str, Any]:
    """The reply of ``python -m module`` to ``request``: a dict holding the ``row``."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", module], input=json.dumps(request), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise BenchError(f"run: the benchmark subprocess exceeded its timeout of {timeout} s") from None
    lines = done.stdout.strip().splitlines()
    reply = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    if done.returncode == 0 and "row" in reply:
        return reply
    if "error" in reply:
        raise BenchError(reply["error"])
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    raise BenchError(f"run: the benchmark subprocess failed with exit status {done.returncode}: {tail}")


def child_main(handle: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    """The child's side: the request from stdin, ``handle``'s reply (or the ZooError) on stdout."""
    request = json.loads(sys.stdin.read())
    try:
        reply = handle(request)
    except ZooError as exc:
        print(json.dumps({"error": str(exc)}))
        return 2
    print(json.dumps(reply))
    return 0

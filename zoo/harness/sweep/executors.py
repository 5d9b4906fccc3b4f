"""Where points run: in this process (analysis only), each in a process of its own (local,
the default for measurements), or each in a Ray task (``zoo.harness.sweep.ray_executor``).

The local executor gives every run its own process. By default the processes are forked
from a *fork server* that imported torch and zoo once (multiprocessing's ``forkserver``,
Linux and macOS): a run still starts in a fresh process that shares no state with the sweep
or with other runs, so a crash, an out-of-memory kill or a hang (``timeout``) ends only that
run, but it starts in about 0.3 s instead of the 3 s a new interpreter needs on a small CPU
to import torch. ``isolation="interpreter"`` uses a new interpreter per run instead
(``zoo.harness.run.measure_in_subprocess``), where forking is not available or not wanted.
Rows reach ``on_row`` in the driver process only, in the order runs end.
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from multiprocessing.connection import wait as wait_any
from pathlib import Path
from typing import Any, Literal, Protocol

from zoo.errors import BenchError
from zoo.harness.run import measure, measure_in_subprocess
from zoo.harness.sweep.grid import SweepPlan, SweepPoint
from zoo.harness.sweep.points import OnRow, evaluate_point, make_row
from zoo.harness.sweep.ray_executor import RayExecutor

Isolation = Literal["forkserver", "interpreter"]
FORKSERVER_PRELOAD = [
    "zoo.harness.sweep.points",
    "zoo.harness.run",
    "zoo.analysis.counts",
    "zoo.model.generation",
    "torch._dynamo",
]
STDERR_TAIL_LINES = 3


class Executor(Protocol):
    def run(self, plan: SweepPlan, points: Sequence[SweepPoint], on_row: OnRow) -> None: ...


class InlineExecutor:
    """Points evaluated in this process, one after another: for analysis-only sweeps (no run,
    nothing to isolate; the whole grid of full-size models takes a second or so)."""

    def run(self, plan: SweepPlan, points: Sequence[SweepPoint], on_row: OnRow) -> None:
        for point in points:
            on_row(evaluate_point(plan, point, None if plan.analysis_only else measure))


class LocalExecutor:
    """Each run in its own process, ``jobs`` at a time (timings of parallel runs compete for
    the same cores: keep ``jobs=1`` for figures you will compare)."""

    def __init__(
        self,
        jobs: int = 1,
        isolation: Isolation | None = None,
        timeout: float | None = None,
        target: Callable[..., None] | None = None,
    ) -> None:
        if jobs < 1:
            raise BenchError(f"jobs: {jobs} is not a number of parallel runs; allowed: 1 or more")
        if isolation is None:
            isolation = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "interpreter"
        if isolation not in ("forkserver", "interpreter"):
            raise BenchError(f"isolation: unknown {isolation!r}; allowed: forkserver, interpreter")
        if isolation == "forkserver" and "forkserver" not in multiprocessing.get_all_start_methods():
            raise BenchError("isolation: forkserver is not available on this platform; allowed: interpreter")
        self.jobs, self.isolation, self.timeout = jobs, isolation, timeout
        self.target = target or _forked_run  # what a forked process runs (a module-level function)

    def run(self, plan: SweepPlan, points: Sequence[SweepPoint], on_row: OnRow) -> None:
        if self.isolation == "interpreter":
            self._run_interpreters(plan, points, on_row)
        else:
            self._run_forked(plan, points, on_row)

    # -- a new interpreter per run: the harness's own subprocess entry point ------------------
    def _run_interpreters(self, plan: SweepPlan, points: Sequence[SweepPoint], on_row: OnRow) -> None:
        def measure(spec, config):  # type: ignore[no-untyped-def]
            return measure_in_subprocess(spec, config, timeout=self.timeout)

        with ThreadPoolExecutor(self.jobs) as pool:
            pending = {pool.submit(evaluate_point, plan, p, measure) for p in points}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    on_row(future.result())

    # -- forked from a fork server that imported torch and zoo once --------------------------
    def _run_forked(self, plan: SweepPlan, points: Sequence[SweepPoint], on_row: OnRow) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(FORKSERVER_PRELOAD)
        plan_json = plan.model_dump_json()
        queue = list(points)
        running: dict[Any, tuple[SweepPoint, Any, Any, Path, float]] = {}
        remove_stale_log_folders()
        logs = Path(tempfile.mkdtemp(prefix=f"{LOG_PREFIX}{os.getpid()}-"))
        try:
            while queue or running:
                while queue and len(running) < self.jobs:
                    point = queue.pop(0)
                    reader, writer = context.Pipe(duplex=False)
                    log = logs / f"{point.id}.log"
                    process = context.Process(
                        target=self.target, args=(plan_json, point.model_dump_json(), writer, str(log)), daemon=True
                    )
                    with _main_script_hidden():
                        process.start()
                    writer.close()
                    running[process.sentinel] = (point, process, reader, log, time.monotonic())
                ready = wait_any([*running, *(r for _, _, r, _, _ in running.values())], timeout=1.0)
                now = time.monotonic()
                for sentinel in list(running):
                    point, process, reader, log, started = running[sentinel]
                    if sentinel in ready or reader in ready or (self.timeout and now - started > self.timeout):
                        row = _collect(point, process, reader, log, self.timeout, started)
                        if row is not None:
                            del running[sentinel]
                            on_row(row)
        finally:
            for _, process, reader, _, _ in running.values():  # interrupted: stop the runs in flight
                process.kill()
                process.join()
                reader.close()
            for log in logs.iterdir():
                log.unlink(missing_ok=True)
            logs.rmdir()


@contextlib.contextmanager
def _main_script_hidden() -> Iterator[None]:
    """Start processes without multiprocessing re-running the caller's script in them.

    The fork server and each process it starts re-import ``__main__`` from its file, so a
    script calling ``zoo.compare`` at top level, without an ``if __name__ == "__main__":``
    guard, would call it again inside every run, where starting processes is refused: each
    row failed with no output. A run needs nothing of the caller's script (its target and
    arguments are zoo's own), so ``__main__`` is replaced by an empty module while a process
    starts, and the script runs once, as written.
    """
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


LOG_PREFIX = "zoo-sweep-"
STALE_UNNAMED_S = 24 * 3600  # folders of older zoo versions carry no pid: removed after a day


def remove_stale_log_folders(root: str | Path | None = None) -> list[Path]:
    """Remove the run-log folders that killed sweeps left in the temp dir (kill -9 skips the
    ``finally`` that removes them): those whose owning process (the pid in the name) is gone."""

    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(f"{LOG_PREFIX}*"):
        owner = folder.name[len(LOG_PREFIX) :].split("-", 1)[0]
        try:
            if owner.isdigit() and "-" in folder.name[len(LOG_PREFIX) :]:
                if _alive(int(owner)):
                    continue
            elif time.time() - folder.stat().st_mtime < STALE_UNNAMED_S:
                continue
            if folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
        except OSError:
            continue
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _collect(
    point: SweepPoint, process: Any, reader: Any, log: Path, timeout: float | None, started: float
) -> dict[str, Any] | None:
    """The row of a run that ended (or overran); None while it is still running."""
    reply = None
    if reader.poll():
        try:
            reply = reader.recv()
        except EOFError:
            reply = None
    elapsed = time.monotonic() - started
    if reply is None and process.is_alive():
        if not (timeout and elapsed > timeout):
            return None
        process.kill()
        process.join()
        reader.close()
        return make_row(point, f"run: exceeded its timeout of {timeout} s and was killed", elapsed_s=elapsed)
    process.join()
    reader.close()
    if reply is not None:
        return json.loads(reply)
    code = process.exitcode
    how = f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"
    if code == -signal.SIGKILL:
        how += " (out of memory?)"
    return make_row(point, f"run: the process crashed ({how}): {_tail(log)}", elapsed_s=elapsed)


def _tail(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no output"
    return " | ".join(lines[-STDERR_TAIL_LINES:]) or "no output"


def _forked_run(plan_json: str, point_json: str, conn: Any, log_path: str) -> None:
    """In the forked process: output to its log file, evaluate, send the row back. Ctrl-C (sent
    to the whole process group) ends it quietly, and a run starting while the sweep cleans up
    after one (its log folder gone) exits without a word: the sweep reports, not its runs."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError:
        os._exit(1)
    os.dup2(fd, 1)
    os.dup2(fd, 2)

    plan = SweepPlan.model_validate_json(plan_json)
    point = SweepPoint.model_validate_json(point_json)
    row = evaluate_point(plan, point, measure)
    conn.send(json.dumps(row, default=str))
    conn.close()


def make_executor(
    name: str = "local",
    *,
    jobs: int = 1,
    isolation: Isolation | None = None,
    timeout: float | None = None,
    address: str | None = None,
) -> Executor:
    """An executor by name: ``local`` (default) or ``ray`` (needs ``pip install -e ".[ray]"``)."""
    check_executor_options(jobs, timeout)
    if name == "local":
        if address is not None:
            raise BenchError("--address is for --executor ray; the local executor runs on this machine")
        return LocalExecutor(jobs=jobs, isolation=isolation, timeout=timeout)
    if name == "ray":
        return RayExecutor(address=address, timeout=timeout)
    raise BenchError(f"executor: unknown {name!r}; allowed: local, ray")


def check_executor_options(jobs: int = 1, timeout: float | None = None) -> None:
    """--jobs and --timeout checked before anything runs (even when no executor is made)."""

    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0
    ):
        raise BenchError(f"timeout: must be a positive number of seconds, got {timeout!r}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise BenchError(f"jobs: must be an integer >= 1, got {jobs!r}")

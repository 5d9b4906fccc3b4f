"""Sweeps: a plan's points run by an executor, each row logged as it ends, resumable.

``run_plan`` is the one driver behind ``zoo compare``, ``zoo sweep``, ``zoo.compare`` and
``zoo.sweep``. With a results directory, rows go to ``<dir>/<name>.jsonl`` (see
``results_log``) and the CSV, Markdown and PNG renderings are rewritten from it; with
``resume`` the points whose ids are already logged are skipped, so an interrupted sweep,
run again, finishes with every point exactly once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoo.errors import BenchError
from zoo.files.atomic import staged_folder
from zoo.harness.context_lengths import parse_context, parse_contexts
from zoo.harness.contexts import as_frame, baseline_label, context_records, crossovers
from zoo.harness.report.tables import render_sweep, sweep_table
from zoo.harness.sweep.executors import Executor, InlineExecutor, check_executor_options, make_executor
from zoo.harness.sweep.grid import MAX_POINTS, SweepPlan, load_plan, plan_from_options
from zoo.harness.sweep.results_log import append_line, check_folder_writable, end_tail, locked, read_locked
from zoo.specs.model import ModelSpec

if TYPE_CHECKING:
    import pandas as pd

Progress = Callable[[dict[str, Any], int, int], None]  # (row, done, total)


def run_plan(
    plan: SweepPlan,
    executor: Executor | None = None,
    results_dir: str | Path | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: Progress | None = None,
    render: bool = True,
    staged: bool = False,
) -> pd.DataFrame:
    """Run every point not yet logged; return the table of all the plan's rows. ``staged``
    (``zoo compare --save``): the log, tables and plots are written aside and replace the
    earlier save only once all are complete."""
    points = plan.expand()
    if results_dir is None:
        return _run_points(plan, points, [], executor, None, progress)
    log = Path(results_dir) / f"{plan.name}.jsonl"
    if staged:
        return _run_staged(plan, points, executor, log, progress, render)
    with locked(log, wait=False) as fd:  # one sweep per log: a second is refused, not duplicated
        logged = read_locked(fd, log)
        if logged and not (resume or overwrite):
            raise BenchError(
                f"{log}: already holds {len(logged)} rows; pass --resume to finish that sweep or --overwrite to "
                "start again"
            )
        if overwrite:
            os.ftruncate(fd, 0)
            logged = []
        end_tail(fd)
        wanted = {p.id for p in points}
        rows = list({row["point_id"]: row for row in reversed(logged) if row.get("point_id") in wanted}.values())[::-1]
        check_folder_writable(log.parent)  # the tables go beside the log: fail before running
        logged_before = len(rows)
        frame = _run_points(plan, points, rows, executor, fd, progress)
        stem = log.with_name(plan.name)
        rendered = all(stem.with_name(f"{stem.name}.{ext}").is_file() for ext in ("csv", "md"))
        if render and (len(rows) > logged_before or not rendered):  # --resume with nothing left rewrites nothing
            render_sweep(frame, rows, stem)
    return frame


def _run_staged(
    plan: SweepPlan, points: list[Any], executor: Executor | None, log: Path, progress: Progress | None, render: bool
) -> pd.DataFrame:
    """Every point into a fresh log in a staging folder beside ``log``; renderings there too;
    then all of them replace the earlier save at once (``zoo.files.atomic.staged_folder``)."""

    existed = log.exists()
    try:
        with locked(log, wait=False):  # one writer per name: a second is refused, as for a sweep
            check_folder_writable(log.parent)
            with staged_folder(log.parent, plan.name) as stage:
                rows: list[dict[str, Any]] = []
                with locked(stage / log.name) as fd:
                    frame = _run_points(plan, points, rows, executor, fd, progress)
                if render:
                    render_sweep(frame, rows, stage / plan.name)
    except BaseException:
        if not existed and log.is_file() and log.stat().st_size == 0:
            log.unlink()  # the empty log the lock created: an interrupted first save leaves nothing
        raise
    return frame


def _run_points(
    plan: SweepPlan,
    points: list[Any],
    rows: list[dict[str, Any]],
    executor: Executor | None,
    fd: int | None,
    progress: Progress | None,
) -> pd.DataFrame:
    """Run the points not in ``rows`` (the first row of each logged id), appending each row."""
    done_ids = {row["point_id"] for row in rows}
    todo = [p for p in points if p.id not in done_ids]
    if executor is None:
        executor = InlineExecutor() if plan.analysis_only else make_executor("local")

    def on_row(row: dict[str, Any]) -> None:
        if fd is not None:
            append_line(fd, row)
        rows.append(row)
        if progress is not None:
            progress(row, len(rows), len(points))

    if todo:
        executor.run(plan, todo, on_row)
    return sweep_frame(plan, rows)


def sweep_frame(plan: SweepPlan, rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per point; with ``plan.contexts`` also ``frame.attrs["contexts"]`` (one record per
    point and context, ``zoo.harness.contexts.context_records``; ``pd.DataFrame(...)`` of it is the
    long table) and ``frame.attrs["crossovers"]``."""

    rows = list(rows)
    baseline = plan.baseline or _default_baseline(plan)
    frame = sweep_table(rows, plan.keys(), baseline)
    if plan.contexts:
        records = context_records(rows, plan.keys(), baseline)
        frame.attrs["contexts"] = records
        frame.attrs["crossovers"] = crossovers(as_frame(records, plan.keys()), baseline_label(rows, baseline))
    return frame


def _default_baseline(plan: SweepPlan) -> dict[str, Any]:
    """The first value of the first axis: each row is compared with its counterpart there."""
    for key, values in plan.vary.items():
        return {key: values[0]}
    return {}


# ---- the public functions ----------------------------------------------------------------------
def compare(
    arch: Any = None,
    vary: Mapping[str, Sequence[Any]] | Iterable[str] = (),
    *,
    attention: Sequence[str] | str | None = None,
    set: Mapping[str, Any] | Iterable[str] = (),
    baseline: Mapping[str, Any] | Iterable[str] | str = (),
    measure: bool = True,
    depth: int | None = 2,
    executor: str | Executor = "local",
    jobs: int = 1,
    timeout: float | None = None,
    results_dir: str | Path | None = None,
    name: str = "compare",
    progress: Progress | None = None,
    contexts: Sequence[int | str] | str | None = None,
    measure_up_to: int | str | None = None,
    max_points: int = MAX_POINTS,
    **run_options: Any,
) -> pd.DataFrame:
    """Variants of one model side by side, as a DataFrame (one row per variant).

    ``arch`` is a preset name or a spec; ``vary`` maps dotted spec keys or run options
    (``batch_size``...) to values; ``attention=["mha", "gqa", "mqa"]`` is
    ``vary={"attention.kind": [...]}``. Analysis columns are of the full-size model; with
    ``measure`` the harness times each variant cut to ``depth`` layers (None: full depth),
    each run in its own process. Ratio columns (``*_vs_baseline``) compare each row with
    ``baseline`` (default: the first value of the first axis).

    ``contexts`` (``["4k", "32k", "128k"]`` or ``"4k,32k,128k"``) adds, per variant and
    context, memory (weights + cache) and decode tokens/s, measured up to ``measure_up_to``
    (default 4k on a host, 32k on CUDA) and predicted beyond: ``frame.attrs["contexts"]``, a
    list of records (``pd.DataFrame(frame.attrs["contexts"])``; see ``zoo.harness.contexts``),
    and ``frame.attrs["crossovers"]``.
    """

    check_executor_options(jobs, timeout)
    spec = arch if isinstance(arch, (ModelSpec, Mapping)) else None
    plan = plan_from_options(
        arch=None if spec is not None else arch,
        spec=spec,
        vary=vary,
        attention=attention,
        set=set,
        baseline=baseline,
        name=name,
        run=run_options,
        depth=depth,
        analysis_only=not measure,
        max_points=max_points,
        **_context_fields(contexts, measure_up_to, "contexts", "measure_up_to"),
    )
    chosen = (
        executor
        if not isinstance(executor, str)
        else (InlineExecutor() if not measure else make_executor(executor, jobs=jobs, timeout=timeout))
    )
    return run_plan(plan, chosen, results_dir, overwrite=results_dir is not None, staged=True, progress=progress)


def sweep(
    plan: SweepPlan | str | Path,
    *,
    results_dir: str | Path | None = "results",
    resume: bool = False,
    overwrite: bool = False,
    executor: str | Executor = "local",
    jobs: int = 1,
    timeout: float | None = None,
    address: str | None = None,
    isolation: str | None = None,
    progress: Progress | None = None,
    contexts: Sequence[int | str] | str | None = None,
    measure_up_to: int | str | None = None,
) -> pd.DataFrame:
    """Run a sweep file (TOML) or plan, logging each row to ``<results_dir>/<name>.jsonl``;
    ``contexts`` and ``measure_up_to`` replace the plan's (see ``compare``)."""
    check_executor_options(jobs, timeout)
    if not isinstance(plan, SweepPlan):
        plan = load_plan(plan)
    fields = _context_fields(contexts, measure_up_to, "contexts", "measure_up_to")
    if fields:
        plan = SweepPlan.model_validate({**plan.model_dump(), **fields})
    chosen = (
        executor
        if not isinstance(executor, str)
        else (
            InlineExecutor()
            if plan.analysis_only and executor == "local"
            else make_executor(executor, jobs=jobs, timeout=timeout, address=address, isolation=isolation)  # type: ignore[arg-type]
        )
    )
    return run_plan(plan, chosen, results_dir, resume=resume, overwrite=overwrite, progress=progress)


def _context_fields(contexts: Any, measure_up_to: Any, what: str, limit_what: str) -> dict[str, Any]:
    """``contexts`` and ``measure_up_to`` parsed (BenchErrors naming ``what``), the given ones only."""

    fields: dict[str, Any] = {}
    if contexts is not None:
        fields["contexts"] = parse_contexts(contexts, what)
    if measure_up_to is not None:
        fields["measure_up_to"] = parse_context(measure_up_to, limit_what)
    return fields

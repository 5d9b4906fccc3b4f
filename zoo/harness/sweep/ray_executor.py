"""Points as Ray tasks: the same evaluation, on a cluster, rows gathered in the driver.

Each task runs ``evaluate_point`` with the harness's one run (``zoo.harness.run.measure``) in a Ray worker that serves
that one task and then exits (``max_calls=1``), so every run has a process of its own, as
locally. A task asks for one GPU when the cluster has GPUs (and runs ``device=auto``, which
then finds the GPU Ray assigned it), else one CPU. A worker that dies (out of memory, a
crash) comes back as the point's failed row. Ray is optional: ``pip install -e ".[ray]"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from zoo.errors import BenchError
from zoo.harness.run import measure
from zoo.harness.sweep.grid import SweepPlan, SweepPoint
from zoo.harness.sweep.points import OnRow, evaluate_point, make_row


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise BenchError(
            'executor ray: Ray is not installed; install it with pip install -e ".[ray]" (or pip install '
            '"ray[default]")'
        ) from None
    return ray


def _remote_evaluate(plan_json: str, point_json: str) -> dict[str, Any]:
    return evaluate_point(SweepPlan.model_validate_json(plan_json), SweepPoint.model_validate_json(point_json), measure)


class RayExecutor:
    """Connects to ``address`` (``auto``: a running cluster; None: a local instance)."""

    def __init__(self, address: str | None = None, timeout: float | None = None, num_cpus: int | None = None) -> None:
        self.ray = _import_ray()
        self.address, self.timeout, self.num_cpus = address, timeout, num_cpus

    def run(self, plan: SweepPlan, points: Sequence[SweepPoint], on_row: OnRow) -> None:
        ray = self.ray
        started_here = not ray.is_initialized()
        if started_here:
            try:
                ray.init(
                    address=self.address,
                    num_cpus=self.num_cpus if self.address is None else None,
                    log_to_driver=False,
                    include_dashboard=False,
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise BenchError(f"executor ray: cannot connect to a Ray cluster at {self.address!r}: {exc}") from None
        try:
            gpus = ray.cluster_resources().get("GPU", 0)
            task = ray.remote(max_calls=1, max_retries=0, num_gpus=1 if gpus else 0, num_cpus=0 if gpus else 1)(
                _remote_evaluate
            )
            plan_json = plan.model_dump_json()
            pending = {task.remote(plan_json, p.model_dump_json()): p for p in points}
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1, timeout=self.timeout)
                if not done:  # nothing finished within the timeout: cancel what runs longest
                    ref = next(iter(pending))
                    ray.cancel(ref, force=True)
                    on_row(
                        make_row(pending.pop(ref), f"run: exceeded its timeout of {self.timeout} s and was cancelled")
                    )
                    continue
                ref = done[0]
                point = pending.pop(ref)
                try:
                    on_row(ray.get(ref))
                except Exception as exc:
                    message = str(exc).strip().splitlines()
                    on_row(
                        make_row(
                            point, f"run: the Ray task failed ({type(exc).__name__}): {message[-1] if message else ''}"
                        )
                    )
        finally:
            if started_here:
                ray.shutdown()

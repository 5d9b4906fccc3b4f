"""Local executors: a crashed or hung run is that point's failed row; the others go on."""

from __future__ import annotations

import zoo
from tests.harness import sweep_helpers
from tests.harness.sweep_helpers import TINY_RUN, write_tiny_spec
from zoo.harness.sweep.executors import LocalExecutor
from zoo.harness.sweep.grid import plan_from_options
from zoo.harness.sweep.run import run_plan


def _plan(tmp_path, kinds="gqa,mqa"):
    return plan_from_options(spec=zoo.ModelSpec.from_file(write_tiny_spec(tmp_path)), attention=kinds, **TINY_RUN)


def test_a_run_killed_by_a_signal_is_a_failed_row_and_the_sweep_goes_on(tmp_path):
    frame = run_plan(_plan(tmp_path, "mha,mqa,gqa"), LocalExecutor(target=sweep_helpers.crash_on_mqa))
    assert list(frame["status"]) == ["ok", "failed", "ok"]
    error = frame["error"][1]
    assert "SIGKILL" in error and "out of memory" in error and "about to be killed" in error


def test_a_run_over_its_timeout_is_killed_and_recorded(tmp_path):
    frame = run_plan(_plan(tmp_path, "gqa"), LocalExecutor(target=sweep_helpers.hang, timeout=1.5))
    assert list(frame["status"]) == ["failed"] and "timeout of 1.5 s" in frame["error"][0]


def test_a_fresh_interpreter_per_run_gives_the_same_rows(tmp_path):
    plan = _plan(tmp_path, "mqa")
    forked = run_plan(plan, LocalExecutor())
    fresh = run_plan(plan, LocalExecutor(isolation="interpreter"))
    assert list(fresh["status"]) == ["ok"]
    columns = ["params_total", "kv_bytes", "weight_bytes", "flops_per_token", "point_id"]
    assert fresh[columns].equals(forked[columns])

"""The Ray executor against a local Ray instance (skipped where Ray is not installed)."""

from __future__ import annotations

import pytest

import zoo
from tests.harness.sweep_helpers import TINY_RUN, write_tiny_spec
from zoo.harness.sweep.grid import plan_from_options
from zoo.harness.sweep.run import run_plan

ray = pytest.importorskip("ray")


def test_the_same_rows_come_back_from_a_local_ray_instance(tmp_path):
    from zoo.harness.sweep.ray_executor import RayExecutor

    spec = zoo.ModelSpec.from_file(write_tiny_spec(tmp_path))
    plan = plan_from_options(
        spec=spec, attention="mqa", points=[{"attention.kind": "gqa", "prompt_len": 100}], name="ray", **TINY_RUN
    )
    frame = run_plan(plan, RayExecutor(num_cpus=2), tmp_path)
    assert list(frame["status"]) == ["ok", "failed"] and "max_seq_len" in frame["error"][1]
    assert frame["decode_tokens_per_s"][0] > 0 and frame["kv_bytes"][0] == zoo.kv_cache_bytes(
        spec.override({"attention.kind": "mqa"}), 1, 12, dtype="float32"
    )
    assert (tmp_path / "ray.jsonl").read_text().count("\n") == 2

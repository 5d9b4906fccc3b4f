"""Sweeps end to end on the CPU: 24 tiny points plus one made to fail, killed with -9 half
way and resumed (every row exactly once), and the results files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import zoo
from tests.harness.sweep_helpers import TINY_RUN, write_sweep_file, write_tiny_spec
from zoo.errors import BenchError
from zoo.harness.sweep.grid import load_plan
from zoo.harness.sweep.results_log import read_log

REPO = Path(__file__).resolve().parents[3]


def _rows(log: Path) -> list[dict]:
    return read_log(log)


def test_a_sweep_killed_with_9_half_way_resumes_to_every_row_exactly_once(tmp_path):
    """Acceptance: >= 24 combinations on the CPU, one failing; kill -9 half way; resume."""
    sweep_file = write_sweep_file(tmp_path)
    results = tmp_path / "results"
    log = results / "grid.jsonl"
    command = [sys.executable, "-m", "zoo", "sweep", str(sweep_file), "--results-dir", str(results), "--jobs", "2"]
    child = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            if log.exists() and log.read_text().count("\n") >= 12:
                break
            time.sleep(0.05)
        assert child.poll() is None, "the sweep ended before it could be killed half way"
        os.killpg(child.pid, signal.SIGKILL)  # the driver, its fork server and the run in flight
        child.wait()
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    before = _rows(log)
    assert 12 <= len(before) < 25

    frame = zoo.sweep(sweep_file, results_dir=results, resume=True, jobs=2)
    rows = _rows(log)
    counts = Counter(row["point_id"] for row in rows)
    plan_ids = {p.id for p in load_plan(sweep_file).expand()}
    assert set(counts) == plan_ids and len(plan_ids) == 25 and set(counts.values()) == {1}
    assert [r["point_id"] for r in rows[: len(before)]] == [r["point_id"] for r in before]  # kept as they were
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == 1 and "prompt_len" in failed[0]["label"] and "max_seq_len" in failed[0]["error"]
    assert len(frame) == 25 and (frame["status"] == "ok").sum() == 24
    ok = frame[frame["status"] == "ok"]
    assert ok["decode_tokens_per_s"].gt(0).all() and ok["measured_n_layers"].eq(2).all()
    # ratios to the gqa row of the same seed, batch and prompt: exact for KV bytes (4 : 2 : 1 heads)
    by_kind = ok.groupby("attention.kind")["kv_bytes_vs_baseline"].unique()
    assert list(by_kind["mha"]) == [2.0] and list(by_kind["gqa"]) == [1.0] and list(by_kind["mqa"]) == [0.5]
    for suffix in (".csv", ".md", "-kv-context.png", "-decode-batch.png", "-params-kv.png"):
        assert (results / f"grid{suffix}").stat().st_size > 0, suffix

    zoo.sweep(sweep_file, results_dir=results, resume=True)  # nothing left: no row added
    assert len(_rows(log)) == 25


def test_a_finished_log_is_not_run_over_without_resume_or_overwrite(tmp_path):
    plan = zoo.harness.sweep.grid.plan_from_options(
        spec=zoo.ModelSpec.from_file(write_tiny_spec(tmp_path)),
        vary=["norm.kind=rmsnorm,layernorm"],
        analysis_only=True,
        name="n",
    )
    zoo.sweep(plan, results_dir=tmp_path)
    with pytest.raises(BenchError, match="--resume"):
        zoo.sweep(plan, results_dir=tmp_path)
    zoo.sweep(plan, results_dir=tmp_path, overwrite=True)
    assert len(read_log(tmp_path / "n.jsonl")) == 2


def test_a_torn_last_line_is_cut_before_resuming(tmp_path):
    plan = zoo.harness.sweep.grid.plan_from_options(
        spec=zoo.ModelSpec.from_file(write_tiny_spec(tmp_path)), vary=["seed=0,1,2"], analysis_only=True, name="t"
    )
    zoo.sweep(plan, results_dir=tmp_path)
    log = tmp_path / "t.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text(lines[0] + lines[1][: len(lines[1]) // 2])  # killed inside the second write
    assert [r["point_id"] for r in read_log(log)] == [json.loads(lines[0])["point_id"]]
    zoo.sweep(plan, results_dir=tmp_path, resume=True)
    assert sorted(r["index"] for r in read_log(log)) == [0, 1, 2]


def test_compare_returns_a_dataframe_with_ratios_to_the_baseline(tmp_path):
    spec = zoo.ModelSpec.from_file(write_tiny_spec(tmp_path))
    frame = zoo.compare(spec, attention=["mha", "gqa", "mqa"], baseline="attention.kind=gqa", **TINY_RUN)
    assert list(frame["attention.kind"]) == ["mha", "gqa", "mqa"]
    assert list(frame["kv_bytes_vs_baseline"]) == [2.0, 1.0, 0.5]
    assert frame["decode_tokens_per_s"].gt(0).all() and frame["decode_tokens_per_s_vs_baseline"].notna().all()
    assert list(frame["kv_bytes"]) == [
        zoo.kv_cache_bytes(spec.override({"attention.kind": k}), 1, 12, dtype="float32") for k in ("mha", "gqa", "mqa")
    ]

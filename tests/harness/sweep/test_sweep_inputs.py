"""Sweep inputs refused before anything runs (one line, exit 2), and what killed sweeps leave."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import zoo
from zoo.errors import BenchError, SpecError
from zoo.harness.sweep.executors import check_executor_options, remove_stale_log_folders
from zoo.harness.sweep.grid import load_plan, plan_from_options

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("timeout", [-1, 0, float("inf"), float("nan"), True])
def test_bad_timeouts(timeout):
    with pytest.raises(BenchError, match="timeout: must be a positive number"):
        check_executor_options(1, timeout)


def test_bad_timeout_fails_before_an_analysis_only_sweep(tmp_path):
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text('arch = "gpt2"\nanalysis_only = true\n[vary]\n"attention.kind" = ["mha"]\n')
    with pytest.raises(BenchError, match="timeout"):
        zoo.sweep(sweep_file, results_dir=tmp_path / "r", timeout=-1)
    assert not (tmp_path / "r").exists()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "zoo",
            "sweep",
            str(sweep_file),
            "--results-dir",
            str(tmp_path / "r"),
            "--timeout",
            "-1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "timeout" in result.stderr
    assert not (tmp_path / "r").exists()


def test_a_whole_component_axis_names_a_known_kind():
    with pytest.raises(SpecError, match="attention: unknown kind 'badkind'"):
        plan_from_options(arch="gpt2", vary=["attention=badkind"], analysis_only=True)
    assert plan_from_options(arch="gpt2", vary=["attention=mqa"], analysis_only=True).vary == {"attention": ["mqa"]}


@pytest.mark.parametrize(
    "text, message",
    [
        ('[run]\nprompt_len = "many"\n', "run: prompt_len"),
        ("[run]\nbatch_size = true\n", "run: batch_size"),
        ("[run]\nseed = -3\n", "run: seed"),
        ('[[points]]\n"attention.kind" = "mqa"\ngen_len = 0\n', "points[0]: gen_len"),
    ],
)
def test_mistyped_run_values_fail_when_the_file_is_read(tmp_path, text, message):
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text('arch = "gpt2"\n[vary]\n"attention.kind" = ["mha"]\n' + text)
    with pytest.raises(BenchError, match=message.replace("[", "\\[")):
        load_plan(sweep_file)


def test_a_run_option_axis_is_checked_value_by_value():
    with pytest.raises(BenchError, match="vary.batch_size: batch_size"):
        plan_from_options(arch="gpt2", vary=["batch_size=1,0"])


def test_stale_log_folders_of_dead_sweeps_are_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"zoo-sweep-{dead.pid}-abc123"
    live = tmp_path / f"zoo-sweep-{os.getpid()}-def456"
    old_unnamed = tmp_path / "zoo-sweep-q1w2e3r4"
    new_unnamed = tmp_path / "zoo-sweep-z9x8c7v6"
    for folder in (stale, live, old_unnamed, new_unnamed):
        folder.mkdir()
        (folder / "point.log").write_text("log")
    day_ago = time.time() - 2 * 86400
    os.utime(old_unnamed, (day_ago, day_ago))
    removed = remove_stale_log_folders(tmp_path)
    assert sorted(removed) == sorted([stale, old_unnamed])
    assert live.exists() and new_unnamed.exists() and not stale.exists()

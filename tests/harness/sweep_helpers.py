"""Shared by the sweep tests: a tiny spec file and sweep files around it, and forked-run
targets that crash or hang on purpose (module level, so a forked process can import them)."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from pathlib import Path

from tests.conftest import tiny_spec

# Small and quick: 8-token prompts, 4 generated, one timed round, one thread per run.
TINY_RUN = {"device": "cpu", "prompt_len": 8, "gen_len": 4, "repeats": 1, "threads": 1}


def write_tiny_spec(directory: Path) -> Path:
    path = directory / "tiny.yaml"
    path.write_text(tiny_spec("qwen3-0.6b").override({"name": "tiny-qwen3"}).to_yaml())
    return path


def write_sweep_file(directory: Path, name: str = "grid", failing_point: bool = True) -> Path:
    """24 grid points (3 attention kinds x 2 seeds x 2 batch sizes x 2 prompt lengths) and,
    optionally, a 25th whose prompt exceeds the model's context: it must fail alone."""
    write_tiny_spec(directory)
    extra = '\n[[points]]\n"attention.kind" = "gqa"\nprompt_len = 100\n' if failing_point else ""
    text = (
        textwrap.dedent(f"""\
        name = "{name}"
        spec_file = "tiny.yaml"
        depth = "full"
        baseline = {{ "attention.kind" = "gqa" }}

        [run]
        device = "cpu"
        gen_len = 4
        repeats = 1
        threads = 1

        [vary]
        "attention.kind" = ["mha", "gqa", "mqa"]
        seed = [0, 1]
        batch_size = [1, 2]
        prompt_len = [8, 12]
        """)
        + extra
    )
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


def crash_on_mqa(plan_json: str, point_json: str, conn, log_path: str) -> None:  # type: ignore[no-untyped-def]
    """A forked run that dies by SIGKILL (as the kernel's OOM killer does) for mqa points."""
    from zoo.harness.sweep.executors import _forked_run

    if '"mqa"' in point_json:
        Path(log_path).write_text("about to be killed\n")
        os.kill(os.getpid(), signal.SIGKILL)
    _forked_run(plan_json, point_json, conn, log_path)


def hang(plan_json: str, point_json: str, conn, log_path: str) -> None:  # type: ignore[no-untyped-def]
    time.sleep(60)

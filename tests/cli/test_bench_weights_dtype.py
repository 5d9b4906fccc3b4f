"""`zoo bench --weights-dtype` through the installed command: the flag reaches the run, and
bad values are one line on stderr with exit status 2."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.conftest import tiny_spec

ZOO = shutil.which("zoo")
pytestmark = pytest.mark.skipif(ZOO is None, reason="the zoo command is not installed")
RUN = ["--device", "cpu", "--prompt-len", "8", "--gen-len", "3", "--repeats", "1", "--threads", "1", "--no-save"]


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(tiny_spec("llama-3.2-1b").override({"name": "tiny", "ffn.hidden": 64, "vocab_size": 300}).to_yaml())
    return path


def _zoo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([ZOO, *args], capture_output=True, text=True, timeout=300)


def test_int4_with_eval_text_as_json(spec_file, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("hello quantized world " * 8)
    done = _zoo(
        "bench",
        "--spec",
        str(spec_file),
        "--weights-dtype",
        "int4",
        "--weights-group-size",
        "64",
        "--eval-text",
        str(text),
        "--json",
        *RUN,
    )
    assert done.returncode == 0, done.stderr
    m = json.loads(done.stdout)
    assert m["weights_dtype"] == "int4" and m["config"]["weights_group_size"] == 64
    assert m["fidelity_kl"] is not None and m["eval_perplexity"] > 1


@pytest.mark.parametrize(
    "args,message",
    [
        (["--weights-dtype", "int3"], "weights_dtype: 'int3' is not a weights dtype"),
        (["--weights-dtype", "int4", "--weights-group-size", "48"], "weights_group_size: 48 is not supported"),
        (["--weights-dtype", "float32", "--dtype", "bfloat16"], "contradicts dtype"),
        (["--weights-dtype", "int8", "--eval-text", "/nonexistent/file.txt"], "cannot read eval_text file"),
    ],
)
def test_bad_values_are_one_line_and_exit_2(spec_file, args, message):
    done = _zoo("bench", "--spec", str(spec_file), *args, *RUN)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_compare_varies_weights_dtype_with_weight_bytes_column():
    done = _zoo("compare", "--arch", "llama-3.2-1b", "--vary", "weights_dtype=bf16,int8,int4", "--analysis-only")
    assert done.returncode == 0, done.stderr
    rows = {
        kind: line
        for line in done.stdout.splitlines()
        for kind in ("bf16", "int8", "int4")
        if f"weights_dtype={kind}" in line
    }
    assert "2,471,628,800" in rows["bf16"] and "1,236,892,160" in rows["int8"] and "1,035,401,728" in rows["int4"]


def test_compare_rejects_a_bad_weights_dtype_in_one_line():
    done = _zoo("compare", "--arch", "llama-3.2-1b", "--vary", "weights_dtype=bf16,int5", "--analysis-only")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "int5" in done.stderr

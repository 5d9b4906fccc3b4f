"""`zoo compare` and `zoo sweep`: the acceptance table, and bad input as one line, exit 2."""

from __future__ import annotations

import re
import sys

import pytest

from tests.harness.sweep_helpers import write_sweep_file, write_tiny_spec
from zoo.cli import main


def test_compare_attention_prints_kv_bytes_exactly_32_8_1(capsys):
    """Acceptance: llama-3.2-1b's KV bytes for mha, gqa, mqa are exactly 32 : 8 : 1."""
    assert main(["compare", "--arch", "llama-3.2-1b", "--attention", "mha,gqa,mqa", "--analysis-only"]) == 0
    out = capsys.readouterr().out
    kv = {}
    for kind in ("mha", "gqa", "mqa"):
        line = next(s for s in out.splitlines() if f"attention.kind={kind}" in s)
        cells = re.split(r"\s{2,}", line.strip())  # plain columns: captured output is not a terminal
        kv[kind] = int(cells[3].replace(",", ""))  # variant, params, KV per token, KV bytes
    assert kv["mha"] == 32 * kv["mqa"] and kv["gqa"] == 8 * kv["mqa"]
    assert "1,235,814,400" in out  # the preset (gqa) has the published parameter count


def test_compare_measures_and_saves_csv(tmp_path, capsys):
    spec = write_tiny_spec(tmp_path)
    argv = [
        "compare",
        "--spec",
        str(spec),
        "--vary",
        "positional.kind=rope,alibi,none",
        "--device",
        "cpu",
        "--prompt-len",
        "8",
        "--gen-len",
        "4",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--csv",
        "--save",
        "pos-3.2",
        "--results-dir",
        str(tmp_path / "r"),
    ]
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("point_id,label,positional.kind,status") and len(lines) == 4
    assert all(",ok," in line for line in lines[1:])
    assert (tmp_path / "r" / "pos-3.2.md").read_text().count("\n") == 5


@pytest.mark.parametrize(
    "argv,message",
    [
        (["compare", "--arch", "llama-3.2-1b", "--vary", "attention.n_kv_head=1,2"], "n_kv_heads"),
        (["compare", "--arch", "llama-3.2-1b", "--vary", "attention.kind="], "empty"),
        (["compare", "--arch", "llama-3.2-1b"], "empty"),
        (["compare", "--arch", "llama-3.2-1b", "--attention", "mha", "--depth", "zero"], "--depth"),
        (["compare", "--arch", "llama-3.2-1x", "--attention", "mha"], "llama-3.2-1b"),
    ],
)
def test_bad_compare_input_exits_2_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err  # raw: a stray blank line would be a second line
    assert len(err.splitlines()) == 1 and err.startswith("zoo: error:") and message in err


def test_a_sweep_file_that_does_not_parse_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[vary\nseed = 1\n")
    assert main(["sweep", str(bad), "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err  # raw: a stray blank line would be a second line
    assert len(err.splitlines()) == 1 and "bad.toml" in err and "not valid TOML" in err


def test_ray_not_installed_exits_2_with_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    sweep_file = write_sweep_file(tmp_path, failing_point=False)
    assert main(["sweep", str(sweep_file), "--executor", "ray", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err  # raw: a stray blank line would be a second line
    assert len(err.splitlines()) == 1 and "Ray is not installed" in err and ".[ray]" in err


def test_an_unknown_executor_exits_2(tmp_path, capsys):
    sweep_file = write_sweep_file(tmp_path, failing_point=False)
    assert main(["sweep", str(sweep_file), "--executor", "slurm", "--results-dir", str(tmp_path)]) == 2
    assert "allowed: local, ray" in capsys.readouterr().err

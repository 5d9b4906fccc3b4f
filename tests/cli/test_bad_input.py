"""Every bad input: exit 2, one line on stderr, no traceback (only with --debug). The CLI's
``main`` runs most cases in-process (the same code the installed command runs); the
installed `zoo` command itself runs the FIFO, alias-bomb and --debug cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ZOO = str(Path(sys.executable).with_name("zoo"))
BOMB = (
    "a: &a [x,x,x,x,x,x,x,x,x]\n"
    + "".join(f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefg", "bcdefgh"))
    + "name: ["
    + ",".join(["*h"] * 9)
    + "]\n"
)


def zoo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ZOO, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def in_process(capsys, *args: str) -> subprocess.CompletedProcess[str]:
    from zoo.cli import main

    code = main(list(args))
    out = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out.out, out.err)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


FILES: dict[str, tuple[bytes, str]] = {
    "bomb.yaml": (BOMB.encode(), "aliases expand to more than"),
    "deep.yaml": (("a: " + "[" * 5000 + "]" * 5000).encode(), "nested more than"),
    "dup.yaml": (b"vocab_size: 10\nvocab_size: 20\n", "duplicate key 'vocab_size'"),
    "latin1.yaml": ("name: caf\u00e9\n".encode("latin-1"), "not UTF-8 text"),
    "deep.json": (b"[" * 100_000 + b"]" * 100_000, "nested"),
}


def test_bad_spec_files(tmp_path, capsys):
    for name, (content, message) in FILES.items():
        (tmp_path / name).write_bytes(content)
        assert message in one_line(in_process(capsys, "show", "--spec", str(tmp_path / name))), name


def test_fifo_and_alias_bomb_through_the_installed_command(tmp_path):
    os.mkfifo(tmp_path / "fifo.yaml")
    assert "it is a FIFO" in one_line(zoo("show", "--spec", "fifo.yaml", cwd=tmp_path))
    (tmp_path / "bomb.yaml").write_text(BOMB)
    assert "aliases expand" in one_line(zoo("show", "--spec", "bomb.yaml", cwd=tmp_path))


def test_bad_set_values_and_seeds(tmp_path, capsys):
    cases = [
        (["show", "gpt2", "--set", "vocab_size=true"], "not the boolean true"),
        (["show", "llama-3.2-1b", "--set", "positional.theta=.inf"], "finite number (got inf)"),
        (["show", "llama-3.2-1b", "--set", "norm.eps=.nan"], "finite number (got nan)"),
        (["show", "gpt2", "--set", "ffn={kind: mlp, kind: swiglu}"], "duplicate key"),
        (["bench", "--arch", "gpt2", "--no-save", "--seed", str(2**64)], "seed"),
    ]
    for args, message in cases:
        assert message in one_line(in_process(capsys, *args)), args


def test_bad_sweep_file_and_hf_config(tmp_path, capsys):
    (tmp_path / "s.toml").write_bytes(b'arch = "gpt2\xff"\n')
    assert "not UTF-8 text" in one_line(in_process(capsys, "sweep", str(tmp_path / "s.toml")))
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_attention_heads": 0,
        "num_hidden_layers": 2,
        "vocab_size": 97,
        "max_position_embeddings": 64,
        "intermediate_size": 96,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert "num_attention_heads: expected a positive integer, got 0" in one_line(
        in_process(capsys, "show", "--hf-config", str(tmp_path / "config.json"))
    )


@pytest.mark.parametrize("debug", [False, True])
def test_traceback_only_with_debug(tmp_path, debug):
    (tmp_path / "dup.yaml").write_text("vocab_size: 10\nvocab_size: 20\n")
    result = zoo(*(["--debug"] if debug else []), "show", "--spec", "dup.yaml", cwd=tmp_path)
    assert result.returncode == 2 and ("Traceback" in result.stderr) == debug

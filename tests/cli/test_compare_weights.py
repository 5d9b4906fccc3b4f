"""Checkpoints side by side: `zoo compare --weights A,B` and `--vary weights=...` in sweeps, one
row per checkpoint naming it and its layout; a tiny Q8_0 GGUF beside its safetensors sibling
(zoo's own save of the dequantized model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import zoo
from tests.hub.gguf.test_quantized_table import q8_file
from zoo.cli import main

gguf = pytest.importorskip("gguf")
RUN = ["--device", "cpu", "--prompt-len", "8", "--gen-len", "4", "--repeats", "1", "--threads", "1"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tied Q8_0 GGUF and the folder of its dequantized weights."""
    tmp = tmp_path_factory.mktemp("pair")
    path, _ = q8_file(tmp, tied=True)
    zoo.save_pretrained(zoo.from_pretrained(path, dequantize=True, progress=False), tmp / "sibling")
    return path, tmp / "sibling"


def test_compare_weights_puts_each_checkpoint_in_a_row_with_its_layout(pair: tuple[Path, Path], capsys) -> None:
    gguf_file, sibling = pair
    assert main(["compare", "--weights", f"{gguf_file},{sibling}", *RUN, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["label"] for r in rows] == [f"weights={gguf_file}", f"weights={sibling}"]
    held, floats = rows
    assert held["weights_layout"] == "Q8_0 -> int8 x8, int8 table (the head's); the rest bfloat16"
    assert held["dtype"] == "bfloat16" and floats["dtype"] == "float32" and floats["weights_layout"] == "float32"
    assert held["params_total"] == floats["params_total"] == 426_880  # the same model, counted from the same spec
    assert floats["weight_bytes"] == 4 * 426_880
    assert held["weight_bytes"] < floats["weight_bytes"] / 3  # int8 against float32, plus scales and norms
    assert held["measured_n_layers"] == floats["measured_n_layers"] == 1  # a checkpoint is measured whole
    assert held["decode_tokens_per_s"] > 0 and floats["decode_tokens_per_s"] > 0
    assert main(["compare", "--weights", f"{gguf_file},{sibling}", "--analysis-only"]) == 0
    table = capsys.readouterr().out
    assert "weights layout" in table and "int8 table" in table
    assert main(["compare", "--weights", f"{gguf_file},{sibling}", "--analysis-only", "--dequantize", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[0]["weights_layout"] == "float32" and rows[0]["weight_bytes"] == 4 * 426_880


def test_vary_weights_in_a_sweep_and_checkpoints_with_spec_fields_refused(pair: tuple[Path, Path], capsys) -> None:
    gguf_file, sibling = pair
    frame = zoo.compare(vary={"weights": [str(gguf_file), str(sibling)]}, measure=False, dtype="bfloat16")
    assert list(frame["weights"]) == [str(gguf_file), str(sibling)]
    assert list(frame["dtype"]) == ["bfloat16", "bfloat16"]
    assert frame["weight_bytes"].iloc[1] == 2 * 426_880
    argv = ["compare", "--weights", f"{gguf_file},{sibling}", "--set", "n_layers=2", "--analysis-only"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "n_layers: a checkpoint's model is read from its files" in err


def test_vary_arch_needs_no_arch(capsys) -> None:
    argv = ["compare", "--vary", "arch=llama-3.2-1b,qwen3-0.6b", "--analysis-only", "--format", "json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["arch"] for r in rows] == ["llama-3.2-1b", "qwen3-0.6b"]
    assert main(["compare", "--analysis-only", "--vary", "batch_size=1,2"]) == 2
    assert "give --arch NAME, --spec FILE, --weights A,B or --vary arch=A,B" in capsys.readouterr().err

"""Runs that cannot fit are refused before anything is allocated, naming the figures."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import zoo
from tests.conftest import tiny_spec
from zoo.analysis import memory_check
from zoo.analysis.memory_check import check_fits, needed_bytes
from zoo.errors import BenchError, SpecError
from zoo.harness.run import bench
from zoo.specs.model import MAX_LAYERS


def test_needed_bytes_match_the_analysis():
    spec = tiny_spec("llama-3.2-1b")
    parts = needed_bytes(spec, 2, 8, 4, torch.float32)
    assert parts["weights"] == zoo.count_params(spec).total * 4
    assert parts["kv"] == zoo.kv_cache_bytes(spec, 2, 12, torch.float32)
    assert parts["activations"] > 0


def test_a_run_bigger_than_free_memory_is_refused_before_building(monkeypatch):
    monkeypatch.setattr(memory_check, "free_bytes", lambda device: 10 * 2**20)
    built = []
    monkeypatch.setattr(zoo, "build", lambda *a, **k: built.append(1))
    spec = tiny_spec("llama-3.2-1b").override({"vocab_size": 100_000})
    with pytest.raises(
        BenchError,
        match=r"needs about .* GiB on cpu \(weights .*KV cache .* at batch 1 x 12 tokens.* but 0.0 GiB is free",
    ):
        bench(spec, device="cpu", prompt_len=8, gen_len=4, repeats=1)
    assert built == []
    check_fits(tiny_spec("gpt2"), 1, 8, 4, torch.float32, torch.device("cpu"))  # a tiny run fits


SMALL = {
    "n_layers": 1,
    "d_model": 32,
    "attention.n_heads": 2,
    "attention.head_dim": 16,
    "ffn.hidden": 64,
    "vocab_size": 128,
    "max_seq_len": 64,
}


def test_each_topology_counts_its_own_cache():
    """An encoder keeps no cache; an encoder-decoder self K/V at gen_len and cross K/V at
    prompt_len; both count the weights and their forward's activations."""
    bert = zoo.spec("bert-base-uncased").override(SMALL)
    t5 = zoo.spec("t5-small").override(SMALL)
    encoder = needed_bytes(bert, 2, 8, 4, torch.float32)
    assert encoder["kv"] == 0 and encoder["weights"] == zoo.count_params(bert).total * 4
    assert encoder["activations"] >= 2 * 8 * 128 * 4  # at least the masked-LM logits (B, T, vocab)
    pair = needed_bytes(t5, 2, 8, 4, torch.float32)
    assert (
        pair["kv"]
        == zoo.cache_bytes(t5, 2, 4, 8, torch.float32).total
        > zoo.cache_bytes(t5, 2, 4, 0, torch.float32).total
    )
    assert pair["activations"] > 0


def test_zoo_bench_refuses_an_encoder_that_cannot_fit_in_one_line(monkeypatch, capsys, tmp_path):
    from zoo.cli import main
    from zoo.harness.source import ModelSource

    monkeypatch.setattr(memory_check, "free_bytes", lambda device: 10 * 2**20)
    built = []
    monkeypatch.setattr(ModelSource, "load", lambda *a, **k: built.append(1))
    spec = tmp_path / "bert.yaml"
    spec.write_text(zoo.spec("bert-base-uncased").override(SMALL).to_yaml())
    code = main(
        [
            "bench",
            "--spec",
            str(spec),
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--batch-size",
            "4096",
            "--prompt-len",
            "64",
            "--no-save",
        ]
    )
    out = capsys.readouterr()
    assert code == 2 and out.out == "" and "Traceback" not in out.err and built == []
    lines = out.err.strip().splitlines()
    assert (
        len(lines) == 1 and "needs about" in lines[0] and "no cache (an encoder) at batch 4,096 x 64 tokens" in lines[0]
    )
    assert "activations about" in lines[0] and "but 0.0 GiB is free" in lines[0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "d_model=1000000"], "needs about"),
        (["--batch-size", "1000000000"], "KV cache"),
        (["--set", "d_model=100000000000000000"], "out of range; allowed: at most 2,147,483,647"),  # the spec's bound
    ],
)
def test_zoo_bench_refuses_enormous_runs_in_one_line(capsys, args, message):
    from zoo.cli import main

    code = main(["bench", "--arch", "llama-3.2-1b", "--no-save", *args])
    out = capsys.readouterr()
    assert code == 2 and out.out == "" and "Traceback" not in out.err
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and ("is free" in lines[0] or "out of range" in lines[0])


def test_depth_is_bounded_and_refused_at_once():
    with pytest.raises(SpecError, match=f"n_layers: 10,000,000 layers is more than .* \\(at most {MAX_LAYERS:,}\\)"):
        zoo.spec("gemma-3-270m").override({"n_layers": 10_000_000})
    assert zoo.spec("gpt2").override({"n_layers": MAX_LAYERS}).n_layers == MAX_LAYERS


def test_zoo_show_refuses_ten_million_layers_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "zoo", "show", "llama-3.2-1b", "--set", "n_layers=10000000"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "at most 1,024" in result.stderr

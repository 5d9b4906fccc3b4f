import json

import pytest
import torch

from tests.conftest import tiny_spec
from zoo.cli import main


@pytest.fixture
def tiny_file(tmp_path):
    path = tmp_path / "my_arch.yaml"
    path.write_text(tiny_spec("qwen3-0.6b").override({"name": "mine"}).to_yaml())
    return path


def test_bench_a_spec_file_as_json_and_record_it(tiny_file, tmp_path, capsys):
    results = tmp_path / "results"
    argv = [
        "bench",
        "--spec",
        str(tiny_file),
        "--json",
        "--device",
        "cpu",
        "--prompt-len",
        "8",
        "--gen-len",
        "4",
        "--repeats",
        "1",
        "--results-dir",
        str(results),
        "--predict",
        "l4",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["arch"] == "mine" and out["predicted_gpu"] == "l4" and out["kv_bytes"] > 0
    assert (results / "bench.jsonl").exists() and (results / "bench.csv").exists() and (results / "bench.md").exists()


def test_bench_prints_a_table_with_every_field(tiny_file, capsys):
    argv = [
        "bench",
        "--spec",
        str(tiny_file),
        "--set",
        "attention.n_kv_heads=1",
        "--device",
        "cpu",
        "--prompt-len",
        "8",
        "--gen-len",
        "4",
        "--repeats",
        "1",
        "--no-save",
        "--dtype",
        "bfloat16",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for label in (
        "params total",
        "weight bytes",
        "KV bytes per token",
        "state bytes per sequence",
        "KV + state bytes at context 12",
        "peak memory, prefill",
        "peak memory, decode",
        "prefill tokens/s",
        "decode tokens/s",
        "time to first token",
        "SDPA backend",
        "compile",
        "threads",
        "zoo commit",
        "bfloat16",
        "of 1 repeats",
        "inter-token latency p50 / p90 / p99 (over 3 steps)",
    ):  # gen 4: 3 decode steps x 1 repeat
        assert label in out, label


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--arch", "qwen3-0.6x"], "qwen3-0.6b"),
        (["--arch", "gpt2", "--set", "attention.n_kv_head=1"], "n_kv_head"),
        (["--arch", "gpt2", "--prompt-len", "1000", "--gen-len", "100"], "max_seq_len=1024"),
        (["--arch", "gpt2", "--device", "cuda:9" if torch.cuda.is_available() else "cuda"], "device"),
        (["--arch", "gpt2", "--predict", "v100"], "unknown GPU"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, message, capsys):
    assert main(["bench", "--no-save", *argv]) == 2
    err = capsys.readouterr().err  # raw: a stray blank line would be a second line
    assert len(err.splitlines()) == 1 and err.startswith("zoo: error:") and message in err


def test_a_spec_file_that_does_not_parse_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    assert main(["bench", "--no-save", "--spec", str(bad)]) == 2
    err = capsys.readouterr().err  # raw: a stray blank line would be a second line
    assert len(err.splitlines()) == 1 and "bad.yaml" in err


def test_bench_an_encoder_and_an_encoder_decoder(capsys):
    small = {
        "n_layers": 1,
        "d_model": 32,
        "attention.n_heads": 2,
        "attention.n_kv_heads": 2,
        "attention.head_dim": 16,
        "ffn.hidden": 64,
        "vocab_size": 128,
    }
    base = ["--device", "cpu", "--prompt-len", "8", "--repeats", "1", "--no-save", "--json"]
    sets = [f"{k}={v}" for k, v in small.items()]
    assert main(["bench", "--arch", "bert-base-uncased", *sum((["--set", s] for s in sets), []), *base]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["topology"] == "encoder" and out["encoder_tokens_per_s"] > 0 and out["decode_tokens_per_s"] is None
    seq2seq = sets + [
        "encoder.n_layers=1",
        "cross_attention.n_heads=2",
        "cross_attention.n_kv_heads=2",
        "cross_attention.head_dim=16",
    ]
    assert (
        main(
            ["bench", "--arch", "transformer-base", *sum((["--set", s] for s in seq2seq), []), *base, "--gen-len", "3"]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["topology"] == "encoder-decoder" and out["decode_tokens_per_s"] > 0
    assert out["self_kv_bytes"] == 3 * 2 * 32 * 4 and out["cross_kv_bytes"] == 8 * 2 * 32 * 4


@pytest.mark.parametrize(
    "option,field",
    [(["--compile"], "compile"), (["--gen-len", "4"], "gen_len"), (["--weights-dtype", "int8"], "weights_dtype")],
)
def test_decoder_options_on_an_encoder_are_one_line_exit_2(option, field, capsys):
    argv = ["bench", "--arch", "bert-base-uncased", "--set", "n_layers=1", "--device", "cpu", "--no-save", *option]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{field}:" in err and "is an encoder" in err


def test_bench_predicts_an_encoder_decoder_roofline(capsys):
    """--predict on an encoder-decoder: encoder, prefill (the start token) and decode rooflines,
    one per phase (the figures themselves: tests/harness/test_prediction.py)."""
    sets = [
        "n_layers=1",
        "d_model=32",
        "attention.n_heads=2",
        "ffn.hidden=64",
        "vocab_size=128",
        "encoder.n_layers=1",
        "cross_attention.n_heads=2",
    ]
    argv = [
        "bench",
        "--arch",
        "transformer-base",
        *sum((["--set", s] for s in sets), []),
        "--device",
        "cpu",
        "--prompt-len",
        "8",
        "--gen-len",
        "3",
        "--repeats",
        "1",
        "--no-save",
        "--predict",
        "h100-sxm",
    ]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (
        out["predicted_gpu"] == "h100-sxm" and out["encoder_roofline_fraction"] > 0
    )  # of the host's (fixed, tests/conftest.py) peaks
    assert out["predicted_encoder_tokens_per_s"] > 0 and out["predicted_decode_tokens_per_s"] > 0
    assert out["predicted_bound"].startswith("encoder: ") and "decode: " in out["predicted_bound"]
    assert main(argv) == 0
    assert "roofline on h100-sxm: prefill tokens/s" in capsys.readouterr().out

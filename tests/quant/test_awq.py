"""zoo's own AWQ: never worse than round-to-nearest on the calibration activations, saved
as an AWQ checkpoint that loads back as exactly the quantized model, and the CLI."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

import zoo
from zoo.cli import main
from zoo.hub.quantized_checkpoints import save_awq
from zoo.quant.awq import quantize_model

TEXT = "The quick brown fox jumps over the lazy dog. " * 40 + "Pack my box with five dozen liquor jugs. " * 30


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny byte-vocabulary llama whose norms have a few large channels (activation outliers)."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=256,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layernorm" in name:
                p.copy_(1 + torch.rand_like(p) * torch.where(torch.rand_like(p) < 0.1, 20.0, 0.5))
    folder = tmp_path_factory.mktemp("awq") / "tiny"
    model.save_pretrained(folder)
    return folder


def tokens() -> torch.Tensor:
    return torch.tensor(list(TEXT.encode()), dtype=torch.long)


def test_awq_error_is_at_most_rtn_per_group(checkpoint: Path) -> None:
    model = zoo.from_pretrained(checkpoint, progress=False)
    result = quantize_model(model, tokens(), "awq", 32)
    assert len(result.layers) == 14
    for producer, (chosen, rtn) in result.errors.items():
        assert chosen <= rtn, producer
    assert any(alpha > 0 for alpha in result.alphas.values())  # the norm-fed groups scale
    assert sum(e[0] for e in result.errors.values()) < sum(e[1] for e in result.errors.values())


def test_saved_awq_checkpoint_loads_as_the_quantized_model(checkpoint: Path, tmp_path: Path) -> None:
    model = zoo.from_pretrained(checkpoint, progress=False)
    result = quantize_model(model, tokens(), "awq", 32)
    with torch.no_grad():  # the reference: folded norms, each linear its dequantized integers
        for name, q in result.layers.items():
            model.get_submodule(name).weight.copy_(q.dequantize())
    save_awq(model, result.layers, tmp_path / "q", 32, checkpoint)
    loaded = zoo.from_pretrained(tmp_path / "q", progress=False)
    assert loaded.weights_layout.startswith("awq 4-bit g32 -> int4 x14")
    ids = tokens()[None, :40]
    with torch.no_grad():
        assert (loaded(ids) - model(ids)).abs().max().item() < 1e-4


def test_cli_prints_awq_and_rtn(checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    calib = tmp_path / "calib.txt"
    calib.write_text(TEXT)
    assert (
        main(
            [
                "quantize",
                "--method",
                "awq",
                "--calib",
                str(calib),
                "--weights",
                str(checkpoint),
                "--out",
                str(tmp_path / "out"),
                "--group-size",
                "32",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[2:]] == ["float", "awq", "rtn"]
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_cli_refuses_a_checkpoint_without_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.hub.conftest import make_hf_model

    make_hf_model("llama").save_pretrained(tmp_path / "m")  # vocabulary 128, no tokenizer.json
    calib = tmp_path / "calib.txt"
    calib.write_text(TEXT)
    assert (
        main(
            [
                "quantize",
                "--calib",
                str(calib),
                "--weights",
                str(tmp_path / "m"),
                "--out",
                str(tmp_path / "o"),
                "--group-size",
                "32",
            ]
        )
        == 2
    )
    assert "no tokenizer.json" in capsys.readouterr().err

"""QAT: the fake-quantized forward is zoo.quant's quantized forward (same maths), and the
straight-through estimator hands the rounded weight's gradient to the float weight."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.errors import TrainingError
from zoo.quant import quantize
from zoo.quant.linear import Int4Linear, Int8Linear
from zoo.training.config import TrainConfig
from zoo.training.qat import apply_qat, remove_qat
from zoo.training.step import Trainer

TINY = {
    "n_layers": 2,
    "d_model": 64,
    "attention.n_heads": 4,
    "attention.n_kv_heads": 2,
    "attention.head_dim": 16,
    "ffn.hidden": 128,
    "vocab_size": 256,
    "max_seq_len": 64,
    "tie_embeddings": False,
}


def ids() -> torch.Tensor:
    return torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))  # (B, T)


@pytest.mark.parametrize("bits", ["int8", "int4"])
def test_fake_quantized_forward_equals_zoo_quant(bits: str) -> None:
    model = zoo.build(zoo.spec("llama-3.2-1b").override(TINY), seed=0).eval()
    reference = quantize(copy.deepcopy(model), bits)  # float32 model: float32 scales and activations
    assert isinstance(reference.layers[0].ffn.up_proj, Int8Linear if bits == "int8" else Int4Linear)
    names = [n for n, _ in model.named_parameters()]
    assert apply_qat(model, bits) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer, and the head
    assert [n for n, _ in model.named_parameters()] == names  # checkpoints keep their names
    with torch.no_grad():
        ours, theirs = model(ids()), reference(ids())  # (B, T, V)
    assert torch.allclose(ours, theirs, atol=1e-4, rtol=1e-4), (ours - theirs).abs().max()
    plain = zoo.build(zoo.spec("llama-3.2-1b").override(TINY), seed=0).eval()
    assert not torch.allclose(plain(ids()), ours, atol=1e-4)  # the rounding is there
    remove_qat(model)
    assert torch.equal(model(ids()), plain(ids()))


def test_straight_through_gradient_reaches_the_float_weights() -> None:
    model = zoo.build(zoo.spec("llama-3.2-1b").override(TINY), seed=0)
    apply_qat(model, "int4")
    layer = model.layers[0].ffn.down_proj
    x = torch.randn(3, 128, requires_grad=True)
    rounded = layer.weight.detach().clone().requires_grad_(True)  # what the layer multiplies with
    F.linear(x, rounded).sum().backward()
    layer(x).sum().backward()
    assert torch.equal(layer._parameters["weight"].grad, rounded.grad)  # d/dw of round(w) taken as identity
    trainer = Trainer(model, TrainConfig(lr=1e-2))
    batch = trainer.objective.batch(ids())
    losses = [trainer.step(batch).loss for _ in range(5)]
    assert losses[-1] < losses[0]


def test_int4_group_size_must_divide_the_widths() -> None:
    with pytest.raises(TrainingError, match="does not divide in_features=64"):
        apply_qat(zoo.build(zoo.spec("llama-3.2-1b").override(TINY), device="meta"), "int4", group_size=128)


def test_train_cli_compares_qat_and_post_training_quantization(tmp_path, capsys) -> None:
    from zoo.cli import main

    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    common = [
        "train",
        "--arch",
        "llama-3.2-1b",
        *[f"--set={k}={v}" for k, v in TINY.items()],
        "--text",
        str(text),
        "--tokens",
        "512",
        "--batch-size",
        "4",
        "--seq-len",
        "32",
    ]
    assert main([*common, "--qat", "int4"]) == 0
    assert "fake-quantized to int4" in capsys.readouterr().out
    assert main([*common, "--ptq", "int4"]) == 0
    assert "held-out loss with int4 weights (post-training quantization)" in capsys.readouterr().out

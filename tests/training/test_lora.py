"""LoRA: starts at the base model exactly, trains only the adapters, round-trips through
safetensors, and the analysis counts only the adapters' gradients and optimizer state."""

from __future__ import annotations

import functools

import pytest
import torch
import transformers

import zoo
from zoo.analysis.training import training_memory
from zoo.cli import main
from zoo.errors import TrainingError
from zoo.training.config import TrainConfig
from zoo.training.lora import (
    LoraConfig,
    apply_lora,
    load_adapters,
    parse_lora,
    save_adapters,
    trainable_count,
)
from zoo.training.optim import measured_state_bytes
from zoo.training.step import Trainer

TINY = {
    "n_layers": 2,
    "d_model": 32,
    "attention.n_heads": 4,
    "attention.n_kv_heads": 2,
    "attention.head_dim": 8,
    "ffn.hidden": 64,
    "vocab_size": 256,
    "max_seq_len": 64,
}
# by hand, r=4 on q (32 -> 32) and v (32 -> 16): A is (4, 32) for both, B (32, 4) and (16, 4)
ADAPTER_PARAMS = 2 * ((4 * 32 + 32 * 4) + (4 * 32 + 16 * 4))  # 896


def tiny() -> zoo.ModelSpec:
    return zoo.spec("llama-3.2-1b").override(TINY)


def ids() -> torch.Tensor:
    return torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))  # (B, T)


def test_zero_b_gives_the_base_outputs_exactly_and_gradients_reach_only_adapters() -> None:
    base = zoo.build(tiny(), seed=0).eval()
    expected = base(ids())
    wrapped = apply_lora(base, LoraConfig(r=4, alpha=8, targets=("q", "v")))
    assert wrapped == [f"layers.{i}.attention.{p}_proj" for i in range(2) for p in ("q", "v")]
    out = base(ids())
    assert torch.equal(out, expected)
    out.float().pow(2).mean().backward()
    for name, p in base.named_parameters():
        assert (p.grad is not None) == (".lora_" in name), name
    assert base.layers[0].attention.q_proj.lora_B.grad.abs().sum() > 0  # B gets gradient; A's is B^T g = 0 at B = 0
    assert trainable_count(base) == ADAPTER_PARAMS


def test_adapters_round_trip_through_safetensors(tmp_path) -> None:
    model = zoo.build(tiny(), seed=0)
    config = parse_lora("r=4,alpha=8,dropout=0.1,targets=q,v")
    assert config == LoraConfig(r=4, alpha=8, dropout=0.1, targets=("q", "v"))
    apply_lora(model, config)
    trainer = Trainer(model, TrainConfig(lr=1e-2))
    batch = trainer.objective.batch(ids())
    for _ in range(3):
        trainer.step(batch)
    save_adapters(model, config, tmp_path)
    fresh = zoo.build(tiny(), seed=0)
    assert load_adapters(fresh, tmp_path) == config
    model.eval(), fresh.eval()
    assert torch.equal(model(ids()), fresh(ids()))
    assert not torch.equal(fresh(ids()), zoo.build(tiny(), seed=0).eval()(ids()))  # the adapters moved it


def test_analysis_and_optimizer_count_only_adapter_state() -> None:
    config = LoraConfig(r=4, targets=("q", "v"))
    memory = training_memory(tiny(), 2, 16, adapt=functools.partial(apply_lora, config=config))
    full = training_memory(tiny(), 2, 16)
    assert memory.gradients == 4 * ADAPTER_PARAMS and memory.optimizer_state == 8 * ADAPTER_PARAMS  # AdamW f32
    assert memory.weights == full.weights + 4 * ADAPTER_PARAMS
    assert memory.activations < full.activations  # frozen projections keep no input for a weight gradient
    model = zoo.build(tiny(), seed=0)
    apply_lora(model, config)
    trainer = Trainer(model, TrainConfig())
    trainer.step(trainer.objective.batch(ids()))
    assert measured_state_bytes(trainer.optimizer) == 8 * ADAPTER_PARAMS


def test_unknown_target_and_bad_option_name_what_is_allowed() -> None:
    with pytest.raises(TrainingError, match="allowed: down, gate, k, lm_head, o, q, up, v"):
        apply_lora(zoo.build(tiny(), device="meta"), LoraConfig(targets=("qkv",)))
    with pytest.raises(TrainingError, match="rank"):
        parse_lora("rank=4")


def test_train_cli_fine_tunes_a_checkpoint_with_lora(tmp_path, capsys) -> None:
    hf = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(hf).save_pretrained(tmp_path / "ckpt", safe_serialization=True)
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    code = main(
        [
            "train",
            "--weights",
            str(tmp_path / "ckpt"),
            "--lora",
            "r=4,targets=q,v",
            "--text",
            str(text),
            "--tokens",
            "2048",
            "--batch-size",
            "4",
            "--seq-len",
            "32",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert f"trainable parameters: {ADAPTER_PARAMS:,}" in out and "analysed" in out
    model = zoo.from_pretrained(str(tmp_path / "ckpt"))
    assert load_adapters(model, tmp_path / "run").r == 4

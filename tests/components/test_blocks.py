"""Block options: a pre-norm block without its attention norm (ModernBERT's layer 0)."""

import torch

import zoo


def test_first_layer_without_attention_norm() -> None:
    spec = zoo.spec("llama-3.2-1b").override(
        {
            "d_model": 32,
            "n_layers": 2,
            "vocab_size": 50,
            "attention.n_heads": 4,
            "attention.n_kv_heads": 2,
            "ffn.hidden": 48,
            "layers": {"0": {"block": {"attn_norm": False}}},
        }
    )
    model = zoo.build(spec, seed=0)
    names = [name for name, _ in model.named_parameters()]
    assert "layers.0.attn_norm.weight" not in names and "layers.1.attn_norm.weight" in names
    assert zoo.count_params(spec).total == zoo.count_params(spec.override({"layers": {}})).total - 32
    assert model(torch.arange(6)[None]).shape == (1, 6, 50)

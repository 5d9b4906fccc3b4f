"""config.json -> ModelSpec: exact mapping, nothing that changes the computation dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import zoo
from zoo.errors import CheckpointError
from zoo.hub.config import spec_from_hf_config

QWEN3_0_6B = {  # https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}


def test_real_qwen3_config_gives_the_preset_and_its_published_count(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_0_6B))
    spec = zoo.ModelSpec.from_hf_config(tmp_path / "config.json")
    preset = zoo.spec("qwen3-0.6b")
    for family in ("norm", "positional", "attention", "ffn", "block"):
        assert getattr(spec, family) == getattr(preset, family)
    assert zoo.count_params(spec).total == 596_049_920


def test_rope_scaling_and_rope_parameters_are_the_same() -> None:
    llama3 = {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    base = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 100,
        "max_position_embeddings": 131072,
    }
    old = spec_from_hf_config({**base, "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", **llama3}})
    new = spec_from_hf_config({**base, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, **llama3}})
    assert old.positional == new.positional
    assert old.layer(0).positional.options.scaling.factor == 32.0


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("final_logit_softcapping", 30.0, "final_logit_softcapping: 30.0 is not supported"),
        ("attn_logit_softcapping", 50.0, "attn_logit_softcapping: 50.0 is not supported"),
        ("some_new_knob", 1, "some_new_knob: unknown config key"),
    ],
)
def test_unrepresentable_fields_are_errors(key: str, value: object, message: str) -> None:
    config = {
        "model_type": "gemma3_text",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "vocab_size": 100,
        "max_position_embeddings": 128,
        "sliding_window": 8,
        key: value,
    }
    with pytest.raises(CheckpointError, match=message):
        spec_from_hf_config(config)


def test_gemma3_layer_types_and_two_rope_bases() -> None:
    config = {
        "model_type": "gemma3_text",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 6,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "vocab_size": 100,
        "max_position_embeddings": 128,
        "sliding_window": 512,
        "query_pre_attn_scalar": 256,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
    }
    spec = spec_from_hf_config(config)
    windows = [layer.attention.options.window for layer in spec.layer_specs()]
    thetas = [layer.positional.options.theta for layer in spec.layer_specs()]
    assert windows == [512] * 5 + [None]
    assert thetas == [10000.0] * 5 + [1000000.0]
    assert spec.attention.scale == 256**-0.5


def test_qwen3_moe_dense_layers_become_overrides() -> None:
    config = {
        "model_type": "qwen3_moe",
        "hidden_size": 64,
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 100,
        "max_position_embeddings": 128,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "mlp_only_layers": [0, 2],
    }
    kinds = [layer.ffn.kind for layer in spec_from_hf_config(config).layer_specs()]
    assert kinds == ["swiglu", "moe", "swiglu", "moe"]


def test_quantized_checkpoints_are_refused_clearly() -> None:
    with pytest.raises(CheckpointError, match="quantization_config: quantized checkpoints \\(bitsandbytes\\)"):
        spec_from_hf_config({"model_type": "llama", "quantization_config": {"quant_method": "bitsandbytes"}})

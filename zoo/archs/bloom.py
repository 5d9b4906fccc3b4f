"""BLOOM: a pre-norm causal decoder with ALiBi, an embedding LayerNorm, biases everywhere,
a tanh-GELU MLP 4x wide and a tied LM head.

Config: https://huggingface.co/bigscience/bloom-560m/blob/main/config.json
(BloomModel / BloomForCausalLM with the tied head: 559,214,592 parameters).
"""

from __future__ import annotations

from typing import Any


def bloom_560m() -> dict[str, Any]:
    return {
        "name": "bloom-560m",
        "source": "https://huggingface.co/bigscience/bloom-560m/blob/main/config.json",
        "vocab_size": 250880,
        "d_model": 1024,
        "n_layers": 24,
        "max_seq_len": 2048,  # the training length; ALiBi has no table bounding it
        "tie_embeddings": True,
        "embedding": {"kind": "token", "norm": True},
        "norm": {"kind": "layernorm", "eps": 1e-5, "bias": True},
        "positional": {"kind": "alibi", "max_bias": 8.0},
        "attention": {"kind": "mha", "n_heads": 16, "head_dim": 64, "bias": True},
        "ffn": {"kind": "mlp", "hidden": 4096, "activation": "gelu_tanh", "bias": True},
        "block": {"kind": "pre_norm"},
        "final_norm": True,
        "head": {"kind": "causal_lm"},
    }


PRESETS = {"bloom-560m": bloom_560m}

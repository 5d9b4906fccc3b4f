"""MPT: a pre-norm causal decoder without biases, ALiBi, LayerNorms without bias, an
exact-GELU MLP 4x wide (``expansion_ratio``) and a tied LM head; ``attention.clip_qkv``
clamps the fused q/k/v projections where a config sets ``clip_qkv`` (mpt-7b does not).

Config: https://huggingface.co/mosaicml/mpt-7b/blob/main/config.json
(MptForCausalLM with the tied head: 6,649,286,656 parameters).
"""

from __future__ import annotations

from typing import Any


def mpt_7b() -> dict[str, Any]:
    return {
        "name": "mpt-7b",
        "source": "https://huggingface.co/mosaicml/mpt-7b/blob/main/config.json",
        "vocab_size": 50432,
        "d_model": 4096,
        "n_layers": 32,
        "max_seq_len": 2048,
        "tie_embeddings": True,
        "norm": {"kind": "layernorm", "eps": 1e-5, "bias": False},
        "positional": {"kind": "alibi", "max_bias": 8.0},
        "attention": {"kind": "mha", "n_heads": 32, "head_dim": 128, "bias": False},
        "ffn": {"kind": "mlp", "hidden": 16384, "activation": "gelu", "bias": False},
        "block": {"kind": "pre_norm"},
        "final_norm": True,
        "head": {"kind": "causal_lm"},
    }


PRESETS = {"mpt-7b": mpt_7b}

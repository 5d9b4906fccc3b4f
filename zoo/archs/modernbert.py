"""ModernBERT: a pre-norm bidirectional encoder without biases; RoPE, GLU with exact GELU,
an embedding LayerNorm, 128-token local windows (|q - k| <= 64) with RoPE base 1e4, and a
global layer every third (0, 3, 6, ...) with base 1.6e5; layer 0 has no attention norm.

The preset is the bare encoder (transformers' ModernBertModel, 149,014,272 parameters);
``head.kind=masked_lm`` adds ModernBertForMaskedLM's head.
Config: https://huggingface.co/answerdotai/ModernBERT-base/blob/main/config.json
"""

from __future__ import annotations

from functools import partial
from typing import Any

SIZES = {  # name: (d_model, ffn, n_layers, n_heads, repo)
    "modernbert-base": (768, 1152, 22, 12, "answerdotai/ModernBERT-base"),
    "modernbert-large": (1024, 2624, 28, 16, "answerdotai/ModernBERT-large"),
}


def modernbert(name: str) -> dict[str, Any]:
    d, ffn, layers, heads, repo = SIZES[name]
    return {
        "name": name,
        "source": f"https://huggingface.co/{repo}/blob/main/config.json",
        "vocab_size": 50368,
        "d_model": d,
        "n_layers": layers,
        "max_seq_len": 8192,
        "tie_embeddings": True,
        "embedding": {"kind": "token", "norm": True},
        "norm": {"kind": "layernorm", "eps": 1e-5, "bias": False},
        "positional": {"kind": "rope", "theta": 10000.0},
        "attention": {"kind": "mha", "n_heads": heads, "head_dim": 64, "bias": False, "causal": False, "window": 128},
        "ffn": {"kind": "gated", "hidden": ffn, "activation": "gelu", "bias": False},
        "block": {"kind": "pre_norm"},
        "final_norm": True,
        "head": {"kind": "none"},
        "layers": {
            "0::3": {"attention": {"window": None}, "positional": {"theta": 160000.0}},
            "0": {"block": {"attn_norm": False}},
        },
    }


PRESETS = {name: partial(modernbert, name) for name in SIZES}

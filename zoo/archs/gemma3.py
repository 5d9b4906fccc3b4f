"""Gemma 3 text: sandwich norms with (1 + w) RMSNorm, QK-norm, GeGLU, scaled embeddings,
five 512-token sliding-window layers (RoPE 1e4) to one global layer (RoPE 1e6).

Configs: https://huggingface.co/google/gemma-3-270m/blob/main/config.json,
https://huggingface.co/google/gemma-3-1b-pt/blob/main/config.json
"""

from __future__ import annotations

from functools import partial
from typing import Any

SIZES = {  # name: (d_model, ffn, n_layers, repo)
    "gemma-3-270m": (640, 2048, 18, "google/gemma-3-270m"),
    "gemma-3-1b": (1152, 6912, 26, "google/gemma-3-1b-pt"),
}


def gemma3(name: str) -> dict[str, Any]:
    d, ffn, layers, repo = SIZES[name]
    return {
        "name": name,
        "source": f"https://huggingface.co/{repo}/blob/main/config.json",
        "vocab_size": 262144,
        "d_model": d,
        "n_layers": layers,
        "max_seq_len": 32768,
        "tie_embeddings": True,
        "embedding_scale": "sqrt_d_model",
        "norm": {"kind": "rmsnorm", "eps": 1e-6, "unit_offset": True},
        "positional": {"kind": "rope", "theta": 10000.0},
        "attention": {
            "kind": "mqa",
            "n_heads": 4,
            "n_kv_heads": 1,
            "head_dim": 256,
            "qk_norm": True,
            "window": 512,
            "scale": 256**-0.5,  # query_pre_attn_scalar 256
        },
        "ffn": {"kind": "geglu", "hidden": ffn},
        "block": {"kind": "sandwich"},
        # every sixth layer (5, 11, 17, ...) is global, with the global RoPE base
        "layers": {"5::6": {"attention": {"window": None}, "positional": {"theta": 1000000.0}}},
    }


PRESETS = {name: partial(gemma3, name) for name in SIZES}

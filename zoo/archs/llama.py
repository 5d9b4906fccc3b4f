"""Llama 3.1 / 3.2: RMSNorm, SwiGLU, GQA, RoPE with llama3 frequency scaling.

Configs: https://huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json,
https://huggingface.co/meta-llama/Llama-3.2-3B/blob/main/config.json,
https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
"""

from __future__ import annotations

from functools import partial
from typing import Any

SIZES = {  # name: (d_model, ffn, n_layers, n_heads, head_dim, tied, rope factor, repo)
    "llama-3.2-1b": (2048, 8192, 16, 32, 64, True, 32.0, "meta-llama/Llama-3.2-1B"),
    "llama-3.2-3b": (3072, 8192, 28, 24, 128, True, 32.0, "meta-llama/Llama-3.2-3B"),
    "llama-3.1-8b": (4096, 14336, 32, 32, 128, False, 8.0, "meta-llama/Llama-3.1-8B"),
}


def llama(name: str) -> dict[str, Any]:
    d, ffn, layers, heads, head_dim, tied, factor, repo = SIZES[name]
    return {
        "name": name,
        "source": f"https://huggingface.co/{repo}/blob/main/config.json",
        "vocab_size": 128256,
        "d_model": d,
        "n_layers": layers,
        "max_seq_len": 131072,
        "tie_embeddings": tied,
        "norm": {"kind": "rmsnorm", "eps": 1e-5},
        "positional": {
            "kind": "rope",
            "theta": 500000.0,
            "scaling": {
                "type": "llama3",
                "factor": factor,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        },
        "attention": {"kind": "gqa", "n_heads": heads, "n_kv_heads": 8, "head_dim": head_dim},
        "ffn": {"kind": "swiglu", "hidden": ffn},
        "block": {"kind": "pre_norm"},
    }


PRESETS = {name: partial(llama, name) for name in SIZES}

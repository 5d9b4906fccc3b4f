"""Mamba2: a stack of Mamba2 mixers alone (x + mixer(norm(x)), no FFN), tied embeddings.

Config: https://huggingface.co/AntonV/mamba2-130m-hf/blob/main/config.json (the
transformers conversion of state-spaces/mamba2-130m: d_model 768, 24 layers, vocab 50277
padded to a multiple of 16 = 50288; headdim 64, 24 heads, one B/C group, state 128).
"""

from __future__ import annotations

from typing import Any


def mamba2_130m() -> dict[str, Any]:
    return {
        "name": "mamba2-130m",
        "source": "https://huggingface.co/AntonV/mamba2-130m-hf/blob/main/config.json",
        "vocab_size": 50288,
        "d_model": 768,
        "n_layers": 24,
        "max_seq_len": 1048576,
        "tie_embeddings": True,
        "norm": {"kind": "rmsnorm", "eps": 1e-5},
        "positional": {"kind": "none"},
        "attention": {
            "kind": "mamba2",
            "n_heads": 24,
            "head_dim": 64,
            "n_groups": 1,
            "state_size": 128,
            "conv_kernel": 4,
            "chunk_size": 256,
            "eps": 1e-5,
        },
        "ffn": {"kind": "none"},
        "block": {"kind": "pre_norm"},
    }


PRESETS = {"mamba2-130m": mamba2_130m}

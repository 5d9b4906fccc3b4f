"""RWKV-4 presets.

Config: https://huggingface.co/RWKV/rwkv-4-169m-pile/blob/main/config.json (hidden 768,
12 layers, vocab 50277, attention_hidden_size 768, intermediate_size 3072, context_length
1024, rescale_every 6, untied head).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def rwkv_4_169m_pile() -> dict[str, Any]:
    return {
        "name": "rwkv-4-169m-pile",
        "source": "https://huggingface.co/RWKV/rwkv-4-169m-pile/blob/main/config.json",
        "vocab_size": 50277,
        "d_model": 768,
        "n_layers": 12,
        "max_seq_len": 1024,
        "tie_embeddings": False,
        "embedding": {"kind": "token", "norm": True},
        "norm": {"kind": "layernorm", "eps": 1e-5, "bias": True},
        "positional": {"kind": "none"},
        "attention": {"kind": "rwkv", "attention_hidden": 768},
        "ffn": {"kind": "rwkv", "hidden": 3072},
        "block": {"kind": "rwkv", "rescale_every": 6},
        "final_norm": True,
    }


PRESETS: dict[str, Callable[[], dict[str, Any]]] = {"rwkv-4-169m-pile": rwkv_4_169m_pile}

"""GPT-2: learned positions, LayerNorm with biases, GELU (tanh) MLP, tied embeddings.

Config: https://huggingface.co/openai-community/gpt2/blob/main/config.json
"""

from __future__ import annotations

from functools import partial
from typing import Any

SIZES = {  # name: (d_model, n_layers, n_heads, HF repo)
    "gpt2": (768, 12, 12, "openai-community/gpt2"),
    "gpt2-medium": (1024, 24, 16, "openai-community/gpt2-medium"),
    "gpt2-large": (1280, 36, 20, "openai-community/gpt2-large"),
    "gpt2-xl": (1600, 48, 25, "openai-community/gpt2-xl"),
}


def gpt2(name: str) -> dict[str, Any]:
    d, layers, heads, repo = SIZES[name]
    return {
        "name": name,
        "source": f"https://huggingface.co/{repo}/blob/main/config.json",
        "vocab_size": 50257,
        "d_model": d,
        "n_layers": layers,
        "max_seq_len": 1024,
        "tie_embeddings": True,
        "norm": {"kind": "layernorm", "eps": 1e-5, "bias": True},
        "positional": {"kind": "learned"},
        "attention": {"kind": "mha", "n_heads": heads, "head_dim": d // heads, "bias": True},
        "ffn": {"kind": "mlp", "hidden": 4 * d, "activation": "gelu_tanh", "bias": True},
        "block": {"kind": "pre_norm"},
    }


PRESETS = {name: partial(gpt2, name) for name in SIZES}

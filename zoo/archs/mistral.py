"""Mistral 7B (sliding window 4096 on every layer) and Mixtral 8x7B (8 experts, top-2).

Configs: https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json,
https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
"""

from __future__ import annotations

from typing import Any


def _base(name: str, repo: str, theta: float) -> dict[str, Any]:
    return {
        "name": name,
        "source": f"https://huggingface.co/{repo}/blob/main/config.json",
        "vocab_size": 32000,
        "d_model": 4096,
        "n_layers": 32,
        "max_seq_len": 32768,
        "tie_embeddings": False,
        "norm": {"kind": "rmsnorm", "eps": 1e-5},
        "positional": {"kind": "rope", "theta": theta},
        "block": {"kind": "pre_norm"},
    }


def mistral_7b() -> dict[str, Any]:
    return {
        **_base("mistral-7b", "mistralai/Mistral-7B-v0.1", 10000.0),
        "attention": {"kind": "gqa", "n_heads": 32, "n_kv_heads": 8, "head_dim": 128, "window": 4096},
        "ffn": {"kind": "swiglu", "hidden": 14336},
    }


def mixtral_8x7b() -> dict[str, Any]:
    return {
        **_base("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", 1000000.0),
        "attention": {"kind": "gqa", "n_heads": 32, "n_kv_heads": 8, "head_dim": 128},
        "ffn": {
            "kind": "moe",
            "n_experts": 8,
            "top_k": 2,
            "hidden": 14336,
            "routing": "softmax_topk",
            "renormalize": True,
        },
        # "46.7B total parameters but only uses 12.9B parameters per token": both embedding tables counted
        "published": {
            "total": "46.7B",
            "active": "12.9B",
            "active_tables": "embedding+unembedding",
            "source": "https://mistral.ai/news/mixtral-of-experts",
        },
    }


PRESETS = {"mistral-7b": mistral_7b, "mixtral-8x7b": mixtral_8x7b}

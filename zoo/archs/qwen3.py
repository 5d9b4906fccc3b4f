"""Qwen3 dense and MoE: GQA with QK-norm, head_dim 128 independent of d_model, RoPE 1e6.

Configs: https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json (and -1.7B, -4B, -8B),
https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
"""

from __future__ import annotations

from functools import partial
from typing import Any

DENSE = {  # name: (d_model, ffn, n_layers, n_heads, tied, repo)
    "qwen3-0.6b": (1024, 3072, 28, 16, True, "Qwen/Qwen3-0.6B"),
    "qwen3-1.7b": (2048, 6144, 28, 16, True, "Qwen/Qwen3-1.7B"),
    "qwen3-4b": (2560, 9728, 36, 32, True, "Qwen/Qwen3-4B"),
    "qwen3-8b": (4096, 12288, 36, 32, False, "Qwen/Qwen3-8B"),
}


def _common(name: str, repo: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": f"https://huggingface.co/{repo}/blob/main/config.json",
        "vocab_size": 151936,
        "max_seq_len": 40960,
        "norm": {"kind": "rmsnorm", "eps": 1e-6},
        "positional": {"kind": "rope", "theta": 1000000.0},
        "block": {"kind": "pre_norm"},
    }


def qwen3_dense(name: str) -> dict[str, Any]:
    d, ffn, layers, heads, tied, repo = DENSE[name]
    return {
        **_common(name, repo),
        "d_model": d,
        "n_layers": layers,
        "tie_embeddings": tied,
        "attention": {"kind": "gqa", "n_heads": heads, "n_kv_heads": 8, "head_dim": 128, "qk_norm": True},
        "ffn": {"kind": "swiglu", "hidden": ffn},
    }


def qwen3_30b_a3b() -> dict[str, Any]:
    # every layer is MoE: decoder_sparse_step 1, mlp_only_layers []; intermediate_size is unused
    return {
        **_common("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B"),
        "d_model": 2048,
        "n_layers": 48,
        "tie_embeddings": False,
        "attention": {"kind": "gqa", "n_heads": 32, "n_kv_heads": 4, "head_dim": 128, "qk_norm": True},
        "ffn": {
            "kind": "moe",
            "n_experts": 128,
            "top_k": 8,
            "hidden": 768,
            "routing": "softmax_topk",
            "renormalize": True,
        },
        # the model card: "30.5B in total and 3.3B activated" (3.353B: Qwen truncates; both embedding tables counted)
        "published": {
            "total": "30.5B",
            "active": "3.3B",
            "active_tables": "embedding+unembedding",
            "rounding": "down",
            "source": "https://huggingface.co/Qwen/Qwen3-30B-A3B",
        },
    }


PRESETS = {name: partial(qwen3_dense, name) for name in DENSE}
PRESETS["qwen3-30b-a3b"] = qwen3_30b_a3b

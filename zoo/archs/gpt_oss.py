"""gpt-oss: attention sinks, q/k/v/o biases, alternating 128-token windows, MoE with
biased experts and a clamped SwiGLU, RoPE with YaRN scaling.

Configs: https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json,
https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json
"""

from __future__ import annotations

from functools import partial
from typing import Any

SIZES = {"gpt-oss-20b": (24, 32, "openai/gpt-oss-20b"), "gpt-oss-120b": (36, 128, "openai/gpt-oss-120b")}
# the model card's parameter table (total; active per token: the unembedding counted, the embedding not)
PUBLISHED = {"gpt-oss-20b": ("20.9B", "3.61B"), "gpt-oss-120b": ("116.8B", "5.13B")}
MODEL_CARD = "https://arxiv.org/abs/2508.10925"


def gpt_oss(name: str) -> dict[str, Any]:
    layers, experts, repo = SIZES[name]
    return {
        "name": name,
        "source": f"https://huggingface.co/{repo}/blob/main/config.json",
        "vocab_size": 201088,
        "d_model": 2880,
        "n_layers": layers,
        "max_seq_len": 131072,
        "tie_embeddings": False,
        "norm": {"kind": "rmsnorm", "eps": 1e-5},
        "positional": {
            "kind": "rope",
            "theta": 150000.0,
            "scaling": {
                "type": "yarn",
                "factor": 32.0,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "original_max_position_embeddings": 4096,
                "truncate": False,
            },
        },
        "attention": {"kind": "gqa", "n_heads": 64, "n_kv_heads": 8, "head_dim": 64, "bias": True, "sinks": True},
        "ffn": {
            "kind": "moe",
            "n_experts": experts,
            "top_k": 4,
            "hidden": 2880,
            "activation": "swiglu_oai",
            "bias": True,
            "router_bias": True,
            "routing": "topk_softmax",
            "clamp_limit": 7.0,
            "alpha": 1.702,
        },
        "block": {"kind": "pre_norm"},
        "layers": {"0::2": {"attention": {"window": 128}}},  # sliding on even layers
        "published": {
            "total": PUBLISHED[name][0],
            "active": PUBLISHED[name][1],
            "active_tables": "unembedding",
            "source": MODEL_CARD,
        },
    }


PRESETS = {name: partial(gpt_oss, name) for name in SIZES}

"""DeepSeek presets.

Configs: https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json and
https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (V3's multi-token
prediction layer, ``num_nextn_predict_layers``, is not part of the model zoo builds).
"""

from __future__ import annotations

from typing import Any


def _rope(mscale: float) -> dict[str, Any]:
    """RoPE on the 64 rope channels, interleaved pairs, YaRN x40 from a 4096-token original."""
    return {
        "kind": "rope",
        "theta": 10000.0,
        "interleaved": True,
        "scaling": {
            "type": "yarn",
            "factor": 40.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": mscale,
            "mscale_all_dim": mscale,
        },
    }


def deepseek_v2_lite() -> dict[str, Any]:
    # first_k_dense_replace 1: layer 0 has a dense FFN (intermediate_size 10944)
    return {
        "name": "deepseek-v2-lite",
        "source": "https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json",
        "vocab_size": 102400,
        "d_model": 2048,
        "n_layers": 27,
        "max_seq_len": 163840,
        "tie_embeddings": False,
        "norm": {"kind": "rmsnorm", "eps": 1e-6},
        "positional": _rope(0.707),
        "attention": {
            "kind": "mla",
            "n_heads": 16,
            "q_lora_rank": None,
            "kv_lora_rank": 512,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
        },
        "ffn": {
            "kind": "deepseek_moe",
            "n_experts": 64,
            "top_k": 6,
            "hidden": 1408,
            "n_shared_experts": 2,
            "scoring": "softmax",
            "topk_method": "greedy",
            "norm_topk_prob": False,
            "routed_scaling_factor": 1.0,
        },
        "block": {"kind": "pre_norm"},
        "layers": {"0": {"ffn": {"kind": "swiglu", "hidden": 10944}}},
    }


def deepseek_v3() -> dict[str, Any]:
    # first_k_dense_replace 3: layers 0-2 dense (intermediate_size 18432)
    return {
        "name": "deepseek-v3",
        "source": "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json",
        "vocab_size": 129280,
        "d_model": 7168,
        "n_layers": 61,
        "max_seq_len": 163840,
        "tie_embeddings": False,
        "norm": {"kind": "rmsnorm", "eps": 1e-6},
        "positional": _rope(1.0),
        "attention": {
            "kind": "mla",
            "n_heads": 128,
            "q_lora_rank": 1536,
            "kv_lora_rank": 512,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
        },
        "ffn": {
            "kind": "deepseek_moe",
            "n_experts": 256,
            "top_k": 8,
            "hidden": 2048,
            "n_shared_experts": 1,
            "scoring": "sigmoid",
            "topk_method": "noaux_tc",
            "n_group": 8,
            "topk_group": 4,
            "norm_topk_prob": True,
            "routed_scaling_factor": 2.5,
        },
        "block": {"kind": "pre_norm"},
        "layers": {"0-2": {"ffn": {"kind": "swiglu", "hidden": 18432}}},
    }


PRESETS = {"deepseek-v2-lite": deepseek_v2_lite, "deepseek-v3": deepseek_v3}

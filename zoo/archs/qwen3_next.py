"""Qwen3-Next: 48 layers in 12 groups of three Gated DeltaNet layers and one gated-attention
layer, every layer a 512-expert MoE (10 routed + 1 gated shared expert), zero-centred RMSNorm.

Config: https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json
(layer_types unset: full attention where (i + 1) % full_attention_interval == 0; every layer
routed: decoder_sparse_step 1, mlp_only_layers [], so intermediate_size 5120 is unused; the
checkpoint's mtp.* prediction head is not part of the causal LM and is not counted).
"""

from __future__ import annotations

from typing import Any


def qwen3_next_80b_a3b() -> dict[str, Any]:
    return {
        "name": "qwen3-next-80b-a3b",
        "source": "https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json",
        "vocab_size": 151936,
        "d_model": 2048,
        "n_layers": 48,
        "max_seq_len": 262144,
        "tie_embeddings": False,
        "norm": {"kind": "rmsnorm", "eps": 1e-6, "unit_offset": True},
        "positional": {"kind": "rope", "theta": 10000000.0, "partial_rotary_factor": 0.25},
        "attention": {
            "kind": "gqa",
            "n_heads": 16,
            "n_kv_heads": 2,
            "head_dim": 256,
            "qk_norm": True,
            "output_gate": True,
        },
        "ffn": {
            "kind": "moe",
            "n_experts": 512,
            "top_k": 10,
            "hidden": 512,
            "routing": "softmax_topk",
            "renormalize": True,
            "shared_hidden": 512,
            "shared_gate": True,
        },
        "block": {"kind": "pre_norm"},
        # three of every four layers are Gated DeltaNet, which takes no positions
        "layers": {
            "0::4,1::4,2::4": {
                "attention": {
                    "kind": "gated_deltanet",
                    "n_k_heads": 16,
                    "n_v_heads": 32,
                    "head_k_dim": 128,
                    "head_v_dim": 128,
                    "conv_kernel": 4,
                    "eps": 1e-6,
                },
                "positional": {"kind": "none"},
            }
        },
    }


PRESETS = {"qwen3-next-80b-a3b": qwen3_next_80b_a3b}

"""BART (Lewis et al. 2019): a post-norm encoder-decoder with biases, exact GELU, learned
positions per stack read at position + 2, a LayerNorm on each stack's embeddings, no
final norm, embeddings shared by both stacks and the LM head, and ``final_logits_bias``
(a buffer: bart-base has 139,420,416 parameters).

Config: https://huggingface.co/facebook/bart-base/blob/main/config.json
"""

from __future__ import annotations

from functools import partial
from typing import Any

SIZES = {  # name: (d_model, ffn, n_layers per stack, n_heads, repo)
    "bart-base": (768, 3072, 6, 12, "facebook/bart-base"),
    "bart-large": (1024, 4096, 12, 16, "facebook/bart-large"),
}


def bart(name: str) -> dict[str, Any]:
    d, ffn, layers, heads, repo = SIZES[name]
    attention = {"kind": "mha", "n_heads": heads, "head_dim": 64, "bias": True}
    return {
        "name": name,
        "source": f"https://huggingface.co/{repo}/blob/main/config.json",
        "vocab_size": 50265,
        "d_model": d,
        "n_layers": layers,
        "max_seq_len": 1024,
        "tie_embeddings": True,
        "embedding": {"kind": "token", "norm": True},
        "norm": {"kind": "layernorm", "eps": 1e-5, "bias": True},
        "positional": {"kind": "learned", "max_positions": 1026, "offset": 2},
        "attention": attention,
        "ffn": {"kind": "mlp", "hidden": ffn, "activation": "gelu", "bias": True},
        "block": {"kind": "post_norm"},
        "final_norm": False,
        "head": {"kind": "causal_lm", "logits_bias": True},
        "encoder": {"n_layers": layers, "final_norm": False},
        "cross_attention": attention,
        "decoder_start_token_id": 2,
    }


PRESETS = {name: partial(bart, name) for name in SIZES}

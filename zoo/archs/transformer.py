"""The original Transformer (Vaswani et al. 2017, "Attention is all you need", base model):
an encoder-decoder of 6 + 6 post-norm layers, d_model 512, 8 heads, FFN 2048 with ReLU,
sinusoidal positions, token embeddings scaled by sqrt(d_model) and shared between the
encoder, the decoder and the pre-softmax projection (a shared BPE vocabulary of 37,000
tokens, the paper's English-German setup).

Paper: https://arxiv.org/abs/1706.03762 (section 3, table 3 "base"). Built from existing
parts only: mha attention (cross-attention is the same kind), mlp, layernorm, post_norm.
"""

from __future__ import annotations

from typing import Any


def transformer_base() -> dict[str, Any]:
    return {
        "name": "transformer-base",
        "source": "https://arxiv.org/abs/1706.03762",
        "vocab_size": 37000,
        "d_model": 512,
        "n_layers": 6,
        "max_seq_len": 1024,
        "tie_embeddings": True,
        "embedding_scale": "sqrt_d_model",
        "norm": {"kind": "layernorm", "eps": 1e-6, "bias": True},
        "positional": {"kind": "sinusoidal"},
        "attention": {"kind": "mha", "n_heads": 8, "head_dim": 64, "bias": True},
        "ffn": {"kind": "mlp", "hidden": 2048, "activation": "relu", "bias": True},
        "block": {"kind": "post_norm"},
        "final_norm": False,
        "encoder": {"n_layers": 6, "final_norm": False},
        "cross_attention": {"kind": "mha", "n_heads": 8, "head_dim": 64, "bias": True},
        "decoder_start_token_id": 0,
    }


PRESETS = {"transformer-base": transformer_base}

"""T5 (Raffel et al. 2020): a pre-norm encoder-decoder with RMS LayerNorm, no biases,
unscaled attention scores, a learned relative position bias per stack (32 buckets up to
distance 128; bidirectional in the encoder), ReLU FFNs, and embeddings shared by both
stacks and the LM head (the decoder output is scaled by d_model ** -0.5 before it).

Configs: https://huggingface.co/google-t5/t5-small/blob/main/config.json,
https://huggingface.co/google-t5/t5-base/blob/main/config.json
"""

from __future__ import annotations

from functools import partial
from typing import Any

SIZES = {  # name: (d_model, d_ff, n_layers per stack, n_heads, repo)
    "t5-small": (512, 2048, 6, 8, "google-t5/t5-small"),
    "t5-base": (768, 3072, 12, 12, "google-t5/t5-base"),
}


def t5(name: str) -> dict[str, Any]:
    d, ffn, layers, heads, repo = SIZES[name]
    attention = {"kind": "mha", "n_heads": heads, "head_dim": 64, "bias": False, "scale": 1.0}
    return {
        "name": name,
        "source": f"https://huggingface.co/{repo}/blob/main/config.json",
        "vocab_size": 32128,
        "d_model": d,
        "n_layers": layers,
        "max_seq_len": 512,
        "tie_embeddings": True,
        "norm": {"kind": "rmsnorm", "eps": 1e-6},
        "positional": {"kind": "relative_buckets", "num_buckets": 32, "max_distance": 128},
        "attention": attention,
        "ffn": {"kind": "mlp", "hidden": ffn, "activation": "relu", "bias": False},
        "block": {"kind": "pre_norm"},
        "final_norm": True,
        "head": {"kind": "causal_lm", "scale": d**-0.5},
        "encoder": {"n_layers": layers},
        "cross_attention": attention,
        "decoder_start_token_id": 0,
    }


PRESETS = {name: partial(t5, name) for name in SIZES}

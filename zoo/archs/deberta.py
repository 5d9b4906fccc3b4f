"""DeBERTa-v3: a post-norm bidirectional encoder with disentangled attention (content,
content-to-position and position-to-content scores over one LayerNormed table of 256
log-bucketed relative distances, position projections shared with the content ones), no
absolute position embeddings and no token types; the bare encoder (DebertaV2Model).

Config: https://huggingface.co/microsoft/deberta-v3-base/blob/main/config.json
(DebertaV2Model: 183,831,552 parameters, 98,380,800 of them the 128,100-token table).
"""

from __future__ import annotations

from typing import Any


def deberta_v3_base() -> dict[str, Any]:
    return {
        "name": "deberta-v3-base",
        "source": "https://huggingface.co/microsoft/deberta-v3-base/blob/main/config.json",
        "vocab_size": 128100,
        "d_model": 768,
        "n_layers": 12,
        "max_seq_len": 512,
        "tie_embeddings": True,
        "norm": {"kind": "layernorm", "eps": 1e-7, "bias": True},
        "positional": {
            "kind": "disentangled",
            "position_buckets": 256,
            "max_relative_positions": None,
            "norm": True,
            "absolute": False,
        },
        "attention": {
            "kind": "disentangled",
            "n_heads": 12,
            "head_dim": 64,
            "bias": True,
            "pos_att_type": ["p2c", "c2p"],
            "share_att_key": True,
        },
        "ffn": {"kind": "mlp", "hidden": 3072, "activation": "gelu", "bias": True},
        "block": {"kind": "post_norm"},
        "embedding": {"kind": "token", "type_vocab_size": 0, "norm": True},
        "head": {"kind": "none"},
        "final_norm": False,
    }


PRESETS = {"deberta-v3-base": deberta_v3_base}

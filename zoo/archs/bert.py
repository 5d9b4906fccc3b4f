"""BERT: a bidirectional post-norm encoder; word + position + token-type embeddings with
a LayerNorm, exact GELU, no final norm; a pooler (BertModel) or masked-LM head.

Config: https://huggingface.co/google-bert/bert-base-uncased/blob/main/config.json
(BertModel with its pooler: 109,482,240 parameters; without: 108,891,648).
"""

from __future__ import annotations

from typing import Any


def bert_base_uncased() -> dict[str, Any]:
    return {
        "name": "bert-base-uncased",
        "source": "https://huggingface.co/google-bert/bert-base-uncased/blob/main/config.json",
        "vocab_size": 30522,
        "d_model": 768,
        "n_layers": 12,
        "max_seq_len": 512,
        "tie_embeddings": True,
        "norm": {"kind": "layernorm", "eps": 1e-12, "bias": True},
        "positional": {"kind": "learned"},
        "attention": {"kind": "mha", "n_heads": 12, "head_dim": 64, "bias": True, "causal": False},
        "ffn": {"kind": "mlp", "hidden": 3072, "activation": "gelu", "bias": True},
        "block": {"kind": "post_norm"},
        "embedding": {"kind": "token", "type_vocab_size": 2, "norm": True},
        "head": {"kind": "pooler"},
        "final_norm": False,
    }


PRESETS = {"bert-base-uncased": bert_base_uncased}

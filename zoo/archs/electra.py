"""ELECTRA: the discriminator is BERT's post-norm encoder (exact GELU, no final norm, no
pooler) with the replaced-token-detection head; ``embedding.dim`` / ``positional.dim``
are the tables' width where it differs from hidden_size (small models: 128, projected).

Config: https://huggingface.co/google/electra-base-discriminator/blob/main/config.json
(ElectraModel: 108,891,648 parameters; ElectraForPreTraining adds the head: 109,483,009).
"""

from __future__ import annotations

from typing import Any


def electra_base_discriminator() -> dict[str, Any]:
    return {
        "name": "electra-base-discriminator",
        "source": "https://huggingface.co/google/electra-base-discriminator/blob/main/config.json",
        "vocab_size": 30522,
        "d_model": 768,
        "n_layers": 12,
        "max_seq_len": 512,
        "tie_embeddings": False,
        "norm": {"kind": "layernorm", "eps": 1e-12, "bias": True},
        "positional": {"kind": "learned", "max_positions": 512, "dim": 768},
        "attention": {"kind": "mha", "n_heads": 12, "head_dim": 64, "bias": True, "causal": False},
        "ffn": {"kind": "mlp", "hidden": 3072, "activation": "gelu", "bias": True},
        "block": {"kind": "post_norm"},
        "embedding": {"kind": "token", "type_vocab_size": 2, "norm": True, "dim": 768},
        "head": {"kind": "discriminator", "activation": "gelu"},
        "final_norm": False,
    }


PRESETS = {"electra-base-discriminator": electra_base_discriminator}

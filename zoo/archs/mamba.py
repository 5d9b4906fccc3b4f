"""Mamba (v1): a stack of selective-scan mixers, each block x + mixer(rmsnorm(x)), no FFN.

Config: https://huggingface.co/state-spaces/mamba-130m-hf/blob/main/config.json
(d_model 768, 24 layers, vocab 50280 (50277 padded to a multiple of 8), state_size 16,
conv_kernel 4, expand 2, time_step_rank 48 = ceil(768 / 16), layer_norm_epsilon 1e-5,
tied embeddings). A recurrent model has no context limit: ``max_seq_len`` is set to
``MAMBA_CONTEXT`` so only the cache's own length bounds a generation.
"""

from __future__ import annotations

from functools import partial
from typing import Any

MAMBA_CONTEXT = 1 << 20

SIZES = {  # name: (d_model, n_layers, HF repo)
    "mamba-130m": (768, 24, "state-spaces/mamba-130m-hf"),
    "mamba-370m": (1024, 48, "state-spaces/mamba-370m-hf"),
}


def mamba(name: str) -> dict[str, Any]:
    d, layers, repo = SIZES[name]
    return {
        "name": name,
        "source": f"https://huggingface.co/{repo}/blob/main/config.json",
        "vocab_size": 50280,
        "d_model": d,
        "n_layers": layers,
        "max_seq_len": MAMBA_CONTEXT,
        "tie_embeddings": True,
        "norm": {"kind": "rmsnorm", "eps": 1e-5},
        "positional": {"kind": "none"},
        "attention": {"kind": "mamba", "d_state": 16, "d_conv": 4, "expand": 2},
        "ffn": {"kind": "none"},
        "block": {"kind": "pre_norm"},
    }


PRESETS = {name: partial(mamba, name) for name in SIZES}

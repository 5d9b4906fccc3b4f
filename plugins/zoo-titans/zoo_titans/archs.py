"""Titans hybrid presets, Qwen3-0.6B-shaped (Behrouz et al., 2025, arXiv 2501.00663).

The paper publishes no checkpoints, so these are shapes, not released models: the body of
Qwen3-0.6B (https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json: d_model 1024,
28 layers, 16 query heads of 128, 8 key/value heads, SwiGLU 3072, vocabulary 151936) with
its attention replaced by a Titans mixer: ``titans`` uses MAG (sliding-window attention of
4096 gated by a 2-layer memory per head), ``titans-mal`` stacks the memory as a layer
before sliding-window attention (MAL, section 4.3: memory layers alternate with SWA), and
``titans-mac`` uses memory as context in every layer (section 4.1: segments of 512 tokens,
16 persistent tokens; the paper fixes neither for this size, so these are our choices).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

QWEN3_SOURCE = "https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json"
MEMORY = {"n_heads": 16, "head_dim": 128, "memory_depth": 2, "memory_expansion": 2, "chunk_size": 16}


def _body(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": f"https://arxiv.org/abs/2501.00663 (shape: {QWEN3_SOURCE})",
        "vocab_size": 151936,
        "d_model": 1024,
        "n_layers": 28,
        "max_seq_len": 40960,
        "tie_embeddings": True,
        "norm": {"kind": "rmsnorm", "eps": 1e-6},
        "positional": {"kind": "rope", "theta": 1000000.0},
        "ffn": {"kind": "swiglu", "hidden": 3072},
        "block": {"kind": "pre_norm"},
    }


def titans_mag() -> dict[str, Any]:
    attention = {"kind": "titans-mag", **MEMORY, "n_kv_heads": 8, "qk_norm": True, "window": 4096}
    return {**_body("titans"), "attention": attention}


def titans_mal() -> dict[str, Any]:
    swa = {"kind": "gqa", "n_heads": 16, "n_kv_heads": 8, "head_dim": 128, "qk_norm": True, "window": 4096}
    return {
        **_body("titans-mal"),
        "attention": {"kind": "titans-mal", **MEMORY},
        "layers": {"1::2": {"attention": swa}},
    }


def titans_mac() -> dict[str, Any]:
    memory = {k: v for k, v in MEMORY.items() if k != "chunk_size"}  # MAC's memory steps once per segment
    attention = {
        "kind": "titans-mac",
        **memory,
        "n_kv_heads": 8,
        "qk_norm": True,
        "segment_len": 512,
        "n_persistent": 16,
    }
    return {**_body("titans-mac"), "attention": attention}


PRESETS: dict[str, Callable[[], dict[str, Any]]] = {
    "titans": titans_mag,
    "titans-mal": titans_mal,
    "titans-mac": titans_mac,
}

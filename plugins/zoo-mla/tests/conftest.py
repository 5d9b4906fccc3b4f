"""Tiny DeepSeek specs for the plugin's tests; zoo-mla made importable without installing it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from zoo.specs.staging import stage_plugin

stage_plugin(
    Path(__file__).resolve().parents[1]
)  # zoo finds plugins through entry points: a temporary one, the environment untouched

import zoo
from zoo.specs.model import ModelSpec
from zoo.specs.registry import reset_registry

reset_registry()  # in case the registry was built before the install

TINY_VOCAB = 97


def tiny_deepseek(name: str = "deepseek-v2-lite", **updates: object) -> ModelSpec:
    """The preset at test size, structure kept: a dense first layer, then MoE layers."""
    spec = zoo.spec(name)
    dense = {"ffn": {"kind": "swiglu", "hidden": 48}}
    changes: dict[str, object] = {
        "d_model": 64,
        "n_layers": 3,
        "vocab_size": TINY_VOCAB,
        "max_seq_len": 64,
        "attention.n_heads": 4,
        "attention.kv_lora_rank": 16,
        "attention.qk_nope_head_dim": 8,
        "attention.qk_rope_head_dim": 4,
        "attention.v_head_dim": 8,
        "ffn.n_experts": 8,
        "ffn.top_k": 2,
        "ffn.hidden": 16,
        "layers": {"0": dense},
    }
    if spec.attention.q_lora_rank:
        changes["attention.q_lora_rank"] = 24
    if spec.ffn.n_group:
        changes["ffn.n_group"] = 4
        changes["ffn.topk_group"] = 2
    changes.update(updates)
    return spec.override(changes)


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    torch.manual_seed(0)

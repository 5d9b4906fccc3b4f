"""Tiny DeepSeek specs for the plugin's tests; installs the plugin (pip -e) when it is not."""

from __future__ import annotations

import importlib
import importlib.util
import site
import subprocess
import sys
from pathlib import Path

import pytest
import torch


def _ensure_installed() -> None:
    """zoo finds plugins only through installed entry points, so tests need a real install."""
    if importlib.util.find_spec("zoo_mla") is not None:
        return
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", str(Path(__file__).parents[1])]
    if importlib.util.find_spec("setuptools") is not None:
        command.insert(4, "--no-build-isolation")
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    for directory in site.getsitepackages():
        site.addsitedir(directory)
    importlib.invalidate_caches()


_ensure_installed()

import zoo
from zoo.model_spec import ModelSpec
from zoo.registry import reset_registry

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

"""Llama 3's RoPE scaling, stored by llama.cpp as a rope_freqs tensor, read back as llama3
scaling parameters (the published Llama 3.1 / 3.2 settings and head sizes)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.hub.gguf_files import llama3_rope_factors
from zoo.errors import CheckpointError
from zoo.hub.gguf.spec import _llama3_rope


def _recovered(factors: torch.Tensor, dim: int) -> dict:  # type: ignore[type-arg]
    g = SimpleNamespace(tensor=lambda name: factors, shape=lambda name: tuple(factors.shape), path="model.gguf")
    config = {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}, "head_dim": dim}
    _llama3_rope(g, config)  # type: ignore[arg-type]
    return config["rope_parameters"]


@pytest.mark.parametrize("factor, dim", [(8.0, 128), (32.0, 64), (32.0, 128)])  # 3.1 8B; 3.2 1B; 3.2 3B
def test_llama3_scaling_is_recovered_from_rope_freqs(factor: float, dim: int) -> None:
    rope = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": factor,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    factors = llama3_rope_factors(SimpleNamespace(head_dim=dim, rope_parameters=rope))
    assert _recovered(factors, dim) == rope


def test_rope_freqs_that_are_not_llama3_scaling_are_refused() -> None:
    with pytest.raises(CheckpointError, match="rope_freqs.weight.*not Llama 3's scaling"):
        _recovered(torch.tensor([1.0, 3.0, 1.5, 8.0, 2.0, 8.0, 8.0, 8.0]), 16)

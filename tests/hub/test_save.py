"""zoo -> save_pretrained -> transformers loads it and computes the same logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import zoo
from tests.conftest import FAMILY_PRESETS
from tests.hub.conftest import FAMILIES, VOCAB
from zoo.errors import CheckpointError


@pytest.mark.parametrize("family", FAMILIES)
def test_round_trip_through_transformers(family: str, hf_checkpoints, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    transformers = pytest.importorskip("transformers")
    _, folder = hf_checkpoints[family]
    model = zoo.from_pretrained(folder, progress=False)
    zoo.save_pretrained(model, tmp_path / "out")
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    ids = torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (reloaded(ids).logits - model(ids)).abs().max().item() < 1e-4


def test_family_is_inferred_for_a_built_model(tmp_path: Path) -> None:
    from tests.conftest import tiny_spec

    model = zoo.build(tiny_spec("qwen3-0.6b"), seed=0)
    zoo.save_pretrained(model, tmp_path)
    again = zoo.from_pretrained(tmp_path, progress=False)
    assert again.hf_model_type == "qwen3"
    ids = torch.arange(8)[None]
    with torch.no_grad():
        assert torch.equal(again(ids), model(ids))


@pytest.mark.parametrize("preset", FAMILY_PRESETS)
def test_a_built_model_saves_as_a_family_transformers_computes_the_same(preset: str, tmp_path: Path) -> None:
    """No model_type given: the family is inferred from the spec alone, and transformers
    must then compute what zoo does (a windowed llama-shaped spec is mistral, not llama,
    whose attention in transformers has no window)."""
    transformers = pytest.importorskip("transformers")
    from tests.conftest import TINY_VOCAB, tiny_spec

    model = zoo.build(tiny_spec(preset), seed=0).eval()
    zoo.save_pretrained(model, tmp_path)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, TINY_VOCAB, (2, 12), generator=torch.Generator().manual_seed(5))  # past the window of 4
    with torch.no_grad():
        assert (reloaded(ids).logits - model(ids)).abs().max().item() < 1e-4


def test_a_llama_config_with_a_window_is_refused() -> None:
    from tests.conftest import tiny_spec
    from zoo.hub.save import hf_config_from_spec

    config = hf_config_from_spec(tiny_spec("llama-3.2-1b"), "llama")
    with pytest.raises(CheckpointError, match="sliding_window: transformers' Llama has no sliding window"):
        zoo.ModelSpec.from_hf_config({**config, "sliding_window": 4})


def test_spec_without_hf_equivalent_is_an_error(tmp_path: Path) -> None:
    from tests.conftest import tiny_spec

    model = zoo.build(tiny_spec("qwen3-0.6b").override({"positional.kind": "alibi"}), seed=0)
    with pytest.raises(CheckpointError, match="cannot be written as any supported Hugging Face family"):
        zoo.save_pretrained(model, tmp_path)

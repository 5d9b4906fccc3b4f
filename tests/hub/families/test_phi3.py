"""Phi-3 (model_type phi3): a tiny Phi3ForCausalLM saved by transformers loads into zoo with
the same logits (left padding included) and greedy tokens, and zoo's save_pretrained writes
a checkpoint transformers reads back to the same logits. Plain RoPE only: longrope refused."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

import zoo
from zoo.errors import CheckpointError

transformers = pytest.importorskip("transformers")
VOCAB = 96
# head_dim 16, 2 kv heads (GQA), a window of 8 that 20-token prompts cross
CONFIG = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 80,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "original_max_position_embeddings": 128,
    "rms_norm_eps": 1e-5,
    "sliding_window": 8,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    "bos_token_id": None,
    "eos_token_id": None,
    "pad_token_id": None,
    "tie_word_embeddings": False,
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):  # type: ignore[no-untyped-def]
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.Phi3ForCausalLM(transformers.Phi3Config(**CONFIG)).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)  # norms and fused rows not trivial
    folder = tmp_path_factory.mktemp("phi3")
    model.save_pretrained(folder)
    return model, folder


def _left_padded(length: int = 20, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (2, length), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # row 1: five pad tokens on the left
    return ids, mask


def test_logits_match_transformers_with_left_padding(checkpoint) -> None:  # type: ignore[no-untyped-def]
    hf_model, folder = checkpoint
    model = zoo.from_pretrained(folder, progress=False)
    assert model.hf_model_type == "phi3"
    ids, mask = _left_padded()
    with torch.no_grad():
        expected = hf_model(ids, attention_mask=mask).logits
        got = model(ids, attention_mask=mask)
    real = mask.bool()
    assert (got[real] - expected[real]).abs().max().item() < 1e-4
    with torch.no_grad():
        assert (model(ids[:1]) - hf_model(ids[:1]).logits).abs().max().item() < 1e-4  # no mask at all


def test_greedy_tokens_equal_transformers(checkpoint) -> None:  # type: ignore[no-untyped-def]
    hf_model, folder = checkpoint
    model = zoo.from_pretrained(folder, progress=False)
    ids, mask = _left_padded(length=12, seed=2)
    with torch.no_grad():
        reference = hf_model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=16,
            min_new_tokens=16,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    got = zoo.generate(model, ids, attention_mask=mask, max_new_tokens=16)
    assert torch.equal(got, reference)


def test_save_pretrained_round_trip(checkpoint, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    hf_model, folder = checkpoint
    model = zoo.from_pretrained(folder, progress=False)
    zoo.save_pretrained(model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "phi3" and config["architectures"] == ["Phi3ForCausalLM"]
    from safetensors.torch import load_file

    assert set(load_file(tmp_path / "model.safetensors")) == set(load_file(folder / "model.safetensors"))
    reloaded = transformers.Phi3ForCausalLM.from_pretrained(tmp_path).eval()
    ids, _ = _left_padded(seed=3)
    with torch.no_grad():
        assert (reloaded(ids).logits - hf_model(ids).logits).abs().max().item() < 1e-5
    again = zoo.from_pretrained(tmp_path, progress=False)
    assert again.spec.layer_specs() == model.spec.layer_specs()


@pytest.mark.parametrize(
    "key, params",
    [
        (
            "rope_parameters",
            {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 8, "long_factor": [2.0] * 8},
        ),
        ("rope_scaling", {"type": "su", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}),
    ],
)
def test_rope_scaling_other_than_plain_is_refused(key: str, params: dict) -> None:
    config = {**CONFIG, "model_type": "phi3", "rope_parameters": None, key: params}
    with pytest.raises(
        CheckpointError, match=rf"{key}\.rope_type: '(longrope|su)' is not supported for phi3.*allowed: 'default'"
    ):
        zoo.ModelSpec.from_hf_config(config)

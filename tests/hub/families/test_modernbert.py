"""ModernBERT: tiny checkpoints saved by transformers load into zoo with the same outputs.

Hidden states (ModernBertModel, zoo head ``none``) and masked-LM logits
(ModernBertForMaskedLM, zoo head ``masked_lm``) within 1e-4 in float32, with a padded row
in the batch; local layers see |q - k| <= local_attention / 2, global layers every third
with their own RoPE base. save_pretrained writes a checkpoint transformers reads back.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import zoo
from tests.hub.encoder_checkpoints import padded_batch, save_hf_model

transformers = pytest.importorskip("transformers")


def _close_on_real_tokens(got: torch.Tensor, expected: torch.Tensor, mask: torch.Tensor) -> None:
    assert got.shape == expected.shape
    real = mask.bool()
    assert (got[real] - expected[real]).abs().max().item() < 1e-4


@pytest.mark.parametrize(
    ("auto_class", "output"), [("AutoModel", "last_hidden_state"), ("AutoModelForMaskedLM", "logits")]
)
def test_matches_transformers_with_padding(auto_class: str, output: str, tmp_path: Path) -> None:
    hf_model = save_hf_model("modernbert", auto_class, tmp_path)
    model = zoo.from_pretrained(tmp_path, progress=False)
    assert model.hf_model_type == "modernbert"
    ids, mask = padded_batch()
    with torch.no_grad():
        expected = getattr(hf_model(input_ids=ids, attention_mask=mask), output)
        got = model(ids, attention_mask=mask)
    _close_on_real_tokens(got, expected, mask)


def test_spec_has_windows_and_global_rope_every_third(tmp_path: Path) -> None:
    save_hf_model("modernbert", "AutoModel", tmp_path)
    spec = zoo.ModelSpec.from_hf_config(tmp_path / "config.json")
    layers = spec.layer_specs()
    assert [layer.attention.options.window for layer in layers] == [None, 8, 8, None]
    assert [layer.positional.options.theta for layer in layers] == [1000.0, 50.0, 50.0, 1000.0]
    assert not layers[0].attention.options.causal


def test_save_pretrained_round_trip_through_transformers(tmp_path: Path) -> None:
    hf_model = save_hf_model("modernbert", "AutoModelForMaskedLM", tmp_path / "hf")
    model = zoo.from_pretrained(tmp_path / "hf", progress=False)
    zoo.save_pretrained(model, tmp_path / "zoo")
    reloaded = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "zoo").eval()
    ids, mask = padded_batch(seed=3)
    with torch.no_grad():
        _close_on_real_tokens(
            reloaded(input_ids=ids, attention_mask=mask).logits, model(ids, attention_mask=mask), mask
        )
        _close_on_real_tokens(
            reloaded(input_ids=ids, attention_mask=mask).logits,
            hf_model(input_ids=ids, attention_mask=mask).logits,
            mask,
        )


def test_modernbert_base_parameter_count() -> None:
    """ModernBertModel (no MLM head) of answerdotai/ModernBERT-base: 149,014,272."""
    assert zoo.count_params("modernbert-base").total == 149_014_272


def test_modernbert_large_parameter_count() -> None:
    """transformers' ModernBertModel with ModernBERT-large's config (1024 wide, 28 layers): 394,781,696."""
    assert zoo.count_params("modernbert-large").total == 394_781_696


def test_transformers_4_config_as_published() -> None:
    """answerdotai/ModernBERT-base's config.json keys (transformers 4.48 era) map to the preset."""
    config = {
        "architectures": ["ModernBertForMaskedLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 50281,
        "classifier_activation": "gelu",
        "classifier_bias": False,
        "classifier_dropout": 0.0,
        "classifier_pooling": "mean",
        "cls_token_id": 50281,
        "decoder_bias": True,
        "deterministic_flash_attn": False,
        "embedding_dropout": 0.0,
        "eos_token_id": 50282,
        "global_attn_every_n_layers": 3,
        "global_rope_theta": 160000.0,
        "gradient_checkpointing": False,
        "hidden_activation": "gelu",
        "hidden_size": 768,
        "initializer_cutoff_factor": 2.0,
        "initializer_range": 0.02,
        "intermediate_size": 1152,
        "layer_norm_eps": 1e-05,
        "local_attention": 128,
        "local_rope_theta": 10000.0,
        "max_position_embeddings": 8192,
        "mlp_bias": False,
        "mlp_dropout": 0.0,
        "model_type": "modernbert",
        "norm_bias": False,
        "norm_eps": 1e-05,
        "num_attention_heads": 12,
        "num_hidden_layers": 22,
        "pad_token_id": 50283,
        "position_embedding_type": "absolute",
        "sep_token_id": 50282,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "transformers_version": "4.47.0.dev0",
        "vocab_size": 50368,
    }
    spec = zoo.ModelSpec.from_hf_config(config)
    preset = zoo.spec("modernbert-base")
    assert spec.part("head").kind == "masked_lm" and not spec.part("head").options.transform_bias
    bare = spec.override({"head": {"kind": "none"}})
    assert [layer.attention.to_dict() for layer in bare.layer_specs()] == [
        layer.attention.to_dict() for layer in preset.layer_specs()
    ]
    assert [layer.positional.to_dict() for layer in bare.layer_specs()] == [
        layer.positional.to_dict() for layer in preset.layer_specs()
    ]
    assert zoo.count_params(bare).total == 149_014_272


def test_unknown_key_is_refused(tmp_path: Path) -> None:
    config = {
        "model_type": "modernbert",
        "hidden_size": 32,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "intermediate_size": 48,
        "vocab_size": 96,
        "max_position_embeddings": 64,
        "global_attn_every_n_layers": 2,
        "softcap": 30.0,
    }
    with pytest.raises(zoo.errors.CheckpointError, match="softcap"):
        zoo.ModelSpec.from_hf_config(config)

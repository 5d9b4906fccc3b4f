"""DeBERTa-v2/v3: tiny checkpoints saved by transformers load into zoo with the same outputs.

Hidden states (DebertaV2Model) and masked-LM logits (DebertaV2ForMaskedLM) within 1e-4 with
a padded row, for a v3-shaped model (8 log buckets that 20-token inputs overflow, shared
position projections, LayerNormed table, no absolute positions) and a v2-shaped one (exact
distances, own pos_key_proj / pos_query_proj, absolute positions, token types);
save_pretrained read back by transformers; deberta-v3-base's count from transformers'
DebertaV2Model on the meta device.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from tests.hub.encoder_checkpoints import VOCAB, padded_batch

transformers = pytest.importorskip("transformers")

BASE = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 48,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "relative_attention": True,
    "pos_att_type": "p2c|c2p",
}
VARIANTS: dict[str, dict[str, Any]] = {
    "v3": {
        **BASE,
        "position_buckets": 8,
        "max_relative_positions": -1,
        "norm_rel_ebd": "layer_norm",
        "share_att_key": True,
        "position_biased_input": False,
        "type_vocab_size": 0,
        "layer_norm_eps": 1e-7,
    },
    "v2": {
        **BASE,
        "position_buckets": -1,
        "max_relative_positions": 12,
        "norm_rel_ebd": "none",
        "share_att_key": False,
        "position_biased_input": True,
        "type_vocab_size": 2,
    },
    "c2p": {
        **BASE,
        "position_buckets": 8,
        "share_att_key": False,
        "pos_att_type": ["c2p"],
        "position_biased_input": False,
        "type_vocab_size": 0,
    },
}


def _save(variant: str, auto_class: str, folder: Path):  # type: ignore[no-untyped-def]
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.DebertaV2Config(**VARIANTS[variant])
        model = getattr(transformers, auto_class).from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    model.save_pretrained(folder)
    return model


def _max_error(hf_model, model, output: str, seed: int = 0) -> float:  # type: ignore[no-untyped-def]
    ids, mask = padded_batch(seed=seed)
    real = mask.bool()
    with torch.no_grad():
        expected = getattr(hf_model(input_ids=ids, attention_mask=mask), output)
        got = model(ids, attention_mask=mask)
    assert got.shape == expected.shape
    return (got[real] - expected[real]).abs().max().item()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize(
    ("auto_class", "output"), [("AutoModel", "last_hidden_state"), ("AutoModelForMaskedLM", "logits")]
)
def test_matches_transformers_with_padding(variant: str, auto_class: str, output: str, tmp_path: Path) -> None:
    hf_model = _save(variant, auto_class, tmp_path)
    model = zoo.from_pretrained(tmp_path, progress=False, dtype="float32")
    assert model.hf_model_type == "deberta-v2"
    assert _max_error(hf_model, model, output) < 1e-4


def test_save_pretrained_round_trip(tmp_path: Path) -> None:
    hf_model = _save("v3", "AutoModelForMaskedLM", tmp_path / "hf")
    zoo.save_pretrained(zoo.from_pretrained(tmp_path / "hf", progress=False, dtype="float32"), tmp_path / "zoo")
    reloaded = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "zoo").eval()
    ids, mask = padded_batch(seed=3)
    with torch.no_grad():
        a = reloaded(input_ids=ids, attention_mask=mask).logits
        b = hf_model(input_ids=ids, attention_mask=mask).logits
    assert (a[mask.bool()] - b[mask.bool()]).abs().max().item() < 1e-5


def test_log_buckets_match_transformers() -> None:
    from transformers.models.deberta_v2.modeling_deberta_v2 import (
        make_log_bucket_position,
    )

    from zoo.components.disentangled_position import log_bucket_position

    distance = torch.arange(-600, 601)
    for buckets, max_position in ((256, 512), (8, 64), (32, 128)):
        assert torch.equal(
            log_bucket_position(distance, buckets, max_position),
            make_log_bucket_position(distance, buckets, max_position).long(),
        )


def test_deberta_v3_base_parameter_count() -> None:
    """transformers' DebertaV2Model from microsoft/deberta-v3-base's config values."""
    config = transformers.DebertaV2Config(
        vocab_size=128100,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
        relative_attention=True,
        position_buckets=256,
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        pos_att_type="p2c|c2p",
        layer_norm_eps=1e-7,
        max_relative_positions=-1,
        position_biased_input=False,
        type_vocab_size=0,
    )
    with torch.device("meta"):
        reference = sum(p.numel() for p in transformers.AutoModel.from_config(config).parameters())
    assert reference == 183_831_552
    assert zoo.count_params("deberta-v3-base").total == reference


def test_published_config_maps_to_the_preset() -> None:
    """microsoft/deberta-v3-base's config.json, as published."""
    config = {
        "model_type": "deberta-v2",
        "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": 768,
        "initializer_range": 0.02,
        "intermediate_size": 3072,
        "max_position_embeddings": 512,
        "relative_attention": True,
        "position_buckets": 256,
        "norm_rel_ebd": "layer_norm",
        "share_att_key": True,
        "pos_att_type": "p2c|c2p",
        "layer_norm_eps": 1e-7,
        "max_relative_positions": -1,
        "position_biased_input": False,
        "num_attention_heads": 12,
        "num_hidden_layers": 12,
        "type_vocab_size": 0,
        "vocab_size": 128100,
    }
    spec = zoo.ModelSpec.from_hf_config(config)
    preset = zoo.spec("deberta-v3-base")
    for part in ("attention", "positional", "ffn", "embedding", "head", "norm"):
        assert spec.part(part).to_dict() == preset.part(part).to_dict(), part


def test_convolution_is_refused() -> None:
    config = {"model_type": "deberta-v2", **VARIANTS["v3"], "conv_kernel_size": 3}
    with pytest.raises(zoo.errors.CheckpointError, match="conv_kernel_size"):
        zoo.ModelSpec.from_hf_config(config)

"""BLOOM: tiny checkpoints saved by transformers load into zoo with the same logits.

Six heads (not a power of two, so ALiBi's extended slopes run), a left-padded batch,
cached decode equal to the full forward, save_pretrained read back by transformers, and
bloom-560m's parameter count from transformers' own module on the meta device.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import zoo
from tests.hub.families.decoder_checkpoints import (
    VOCAB,
    check_cached_decode,
    check_logits_with_padding,
    check_save_round_trip,
    save_hf_decoder,
)

transformers = pytest.importorskip("transformers")

TINY = {
    "vocab_size": VOCAB,
    "hidden_size": 48,
    "n_layer": 2,
    "n_head": 6,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


@pytest.fixture
def bloom(tmp_path: Path):  # type: ignore[no-untyped-def]
    return save_hf_decoder("bloom", TINY, tmp_path / "hf"), tmp_path / "hf"


def test_logits_match_transformers_with_padding(bloom) -> None:  # type: ignore[no-untyped-def]
    check_logits_with_padding(*bloom)


def test_cached_decode_equals_full_forward(bloom) -> None:  # type: ignore[no-untyped-def]
    check_cached_decode(bloom[1])


def test_save_pretrained_round_trip(bloom, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    check_save_round_trip(*bloom, tmp_path / "zoo")


def test_fused_qkv_rows_are_per_head(bloom) -> None:  # type: ignore[no-untyped-def]
    """query_key_value rows are [heads, 3, head_dim]: head 1's query rows sit at 3 * 8."""
    hf_model, folder = bloom
    model = zoo.from_pretrained(folder, dtype="float32", progress=False)
    fused = hf_model.transformer.h[0].self_attention.query_key_value.weight  # (3 * 48, 48)
    q = model.layers[0].attention.q_proj.weight  # (48, 48)
    assert torch.equal(q[8:16], fused[24:32])


def test_bloom_560m_parameter_count() -> None:
    """transformers' BloomForCausalLM (tied head) from bigscience/bloom-560m's config values."""
    config = transformers.AutoConfig.for_model("bloom", vocab_size=250880, hidden_size=1024, n_layer=24, n_head=16)
    with torch.device("meta"):
        reference = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(config).parameters())
    assert reference == 559_214_592
    assert zoo.count_params("bloom-560m").total == reference


def test_residual_after_norm_is_refused() -> None:
    config = {"model_type": "bloom", **TINY, "apply_residual_connection_post_layernorm": True}
    with pytest.raises(zoo.errors.CheckpointError, match="apply_residual_connection_post_layernorm"):
        zoo.ModelSpec.from_hf_config(config)

"""MPT: tiny checkpoints saved by transformers load into zoo with the same logits.

Six heads (ALiBi's extended slopes), ``clip_qkv`` small enough to clamp, no biases, a
left-padded batch, cached decode equal to the full forward, save_pretrained read back by
transformers, and mpt-7b's parameter count from transformers' own module on the meta device.
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
    "d_model": 48,
    "n_layers": 2,
    "n_heads": 6,
    "max_seq_len": 64,
    "pad_token_id": 0,
    "attn_config": {"clip_qkv": 0.5},
}


@pytest.fixture
def mpt(tmp_path: Path):  # type: ignore[no-untyped-def]
    return save_hf_decoder("mpt", TINY, tmp_path / "hf"), tmp_path / "hf"


def test_logits_match_transformers_with_padding(mpt) -> None:  # type: ignore[no-untyped-def]
    check_logits_with_padding(*mpt)


def test_clip_qkv_clamps(mpt) -> None:  # type: ignore[no-untyped-def]
    """The tiny model's q/k/v outputs exceed 0.5, so the clamp changes the logits."""
    folder = mpt[1]
    spec = zoo.ModelSpec.from_hf_config(folder / "config.json")
    assert spec.attention.clip_qkv == 0.5
    model = zoo.from_pretrained(folder, dtype="float32", progress=False)
    ids = torch.randint(3, VOCAB, (1, 10))
    unclipped = zoo.build(spec.override({"attention.clip_qkv": None}), dtype="float32")
    unclipped.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert (model(ids) - unclipped(ids)).abs().max().item() > 1e-3


def test_cached_decode_equals_full_forward(mpt) -> None:  # type: ignore[no-untyped-def]
    check_cached_decode(mpt[1])


def test_save_pretrained_round_trip(mpt, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    check_save_round_trip(*mpt, tmp_path / "zoo")


def test_mpt_7b_parameter_count() -> None:
    """transformers' MptForCausalLM (tied head) from mosaicml/mpt-7b's config values."""
    config = transformers.AutoConfig.for_model(
        "mpt", d_model=4096, n_heads=32, n_layers=32, expansion_ratio=4, max_seq_len=2048, vocab_size=50432
    )
    with torch.device("meta"):
        reference = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(config).parameters())
    assert reference == 6_649_286_656
    assert zoo.count_params("mpt-7b").total == reference


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("expansion_ratio", 8),
        ("attn_config", {"alibi_bias_max": 16}),
        ("attn_config", {"qk_ln": True}),
        ("attn_config", {"rope": True}),
    ],
)
def test_what_transformers_would_ignore_is_refused(key: str, value: object) -> None:
    config = {"model_type": "mpt", **TINY, key: value}
    with pytest.raises(zoo.errors.CheckpointError, match=key):
        zoo.ModelSpec.from_hf_config(config)

"""ELECTRA: tiny checkpoints saved by transformers load into zoo with the same outputs.

Tables 16 wide projected to a 32-wide encoder (``embeddings_project``): hidden states
(ElectraModel, zoo head ``none``) and discriminator scores (ElectraForPreTraining, zoo head
``discriminator``) within 1e-4 with a padded row; save_pretrained read back by
transformers; electra-base-discriminator's count from transformers' modules on meta.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

import zoo
from tests.hub.encoder_checkpoints import VOCAB, padded_batch

transformers = pytest.importorskip("transformers")

TINY = {
    "vocab_size": VOCAB,
    "embedding_size": 16,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 48,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
}


def _save(auto_class: str, folder: Path):  # type: ignore[no-untyped-def]
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.ElectraConfig(**TINY)
        model = getattr(transformers, auto_class)(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    model.save_pretrained(folder)
    return model


def _outputs(hf_model, model, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # type: ignore[no-untyped-def]
    ids, mask = padded_batch(seed=seed)
    with torch.no_grad():
        out = hf_model(input_ids=ids, attention_mask=mask)
        expected = out.last_hidden_state if hasattr(out, "last_hidden_state") else out.logits[..., None]
        got = model(ids, attention_mask=mask)
    return got, expected, mask.bool()


@pytest.mark.parametrize("auto_class", ["ElectraModel", "ElectraForPreTraining"])
def test_matches_transformers_with_padding(auto_class: str, tmp_path: Path) -> None:
    hf_model = _save(auto_class, tmp_path)
    model = zoo.from_pretrained(tmp_path, progress=False, dtype="float32")
    assert model.spec.part("embedding").options.dim == 16
    got, expected, real = _outputs(hf_model, model)
    assert got.shape == expected.shape
    assert (got[real] - expected[real]).abs().max().item() < 1e-4


def test_save_pretrained_round_trip(tmp_path: Path) -> None:
    hf_model = _save("ElectraForPreTraining", tmp_path / "hf")
    zoo.save_pretrained(zoo.from_pretrained(tmp_path / "hf", progress=False, dtype="float32"), tmp_path / "zoo")
    reloaded = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "zoo").eval()
    ids, mask = padded_batch(seed=3)
    with torch.no_grad():
        a = reloaded(input_ids=ids, attention_mask=mask).logits
        b = hf_model(input_ids=ids, attention_mask=mask).logits
    assert (a[mask.bool()] - b[mask.bool()]).abs().max().item() < 1e-5


def test_electra_base_discriminator_parameter_count() -> None:
    """transformers' ElectraForPreTraining from google/electra-base-discriminator's config values."""
    config = transformers.ElectraConfig(
        vocab_size=30522,
        embedding_size=768,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
        type_vocab_size=2,
    )
    with torch.device("meta"):
        reference = sum(p.numel() for p in transformers.ElectraForPreTraining(config).parameters())
    assert reference == 109_483_009
    assert zoo.count_params("electra-base-discriminator").total == reference


def test_generator_is_refused() -> None:
    config = {"model_type": "electra", **TINY, "architectures": ["ElectraForMaskedLM"]}
    with pytest.raises(zoo.errors.CheckpointError, match="generator"):
        zoo.ModelSpec.from_hf_config(config)

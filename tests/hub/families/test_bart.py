"""BART: tiny checkpoints saved by transformers load into zoo with the same outputs.

Encoder states (a padded row) and logits (final_logits_bias included) within 1e-4 in
float32; greedy generation equal to transformers' ``generate``; cached decoding equal to
the full forward; a BartModel checkpoint (no logits bias) loads; save_pretrained round trip.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import zoo
from tests.hub.encoder_checkpoints import VOCAB, padded_batch, save_hf_model

transformers = pytest.importorskip("transformers")
NEW = 12


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("bart")
    return save_hf_model("bart", "AutoModelForSeq2SeqLM", folder), folder


def _decoder_ids(length: int = 9) -> torch.Tensor:
    return torch.randint(3, VOCAB, (2, length), generator=torch.Generator().manual_seed(5))


def test_encoder_states_and_logits_match_with_padding(checkpoint) -> None:  # type: ignore[no-untyped-def]
    hf_model, folder = checkpoint
    model = zoo.from_pretrained(folder, progress=False)
    assert model.hf_model_type == "bart"
    assert model.lm_head.final_logits_bias.abs().sum() > 0  # loaded, not left at zero
    ids, mask = padded_batch(length=20, pad_id=1)
    decoder_ids = _decoder_ids()
    with torch.no_grad():
        expected = hf_model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids)
        memory = model.encode(ids, attention_mask=mask)
        logits = model(decoder_ids, memory=memory)
    real = mask.bool()
    assert (memory.hidden[real] - expected.encoder_last_hidden_state[real]).abs().max().item() < 1e-4
    assert (logits - expected.logits).abs().max().item() < 1e-4


def test_greedy_generation_equals_transformers(checkpoint) -> None:  # type: ignore[no-untyped-def]
    hf_model, folder = checkpoint
    model = zoo.from_pretrained(folder, progress=False)
    ids, mask = padded_batch(length=16, pad_id=1, seed=7)
    with torch.no_grad():
        reference = hf_model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            eos_token_id=None,
            num_beams=1,
        )
    got = zoo.generate(model, ids, attention_mask=mask, max_new_tokens=NEW)
    assert torch.equal(got, reference)


def test_cached_decoding_equals_full_forward(checkpoint) -> None:  # type: ignore[no-untyped-def]
    from zoo.model.cache import KVCache

    _, folder = checkpoint
    model = zoo.from_pretrained(folder, progress=False)
    ids, mask = padded_batch(length=16, pad_id=1, seed=8)
    decoder_ids = _decoder_ids(length=8)
    with torch.no_grad():
        memory = model.encode(ids, attention_mask=mask)
        full = model(decoder_ids, memory=memory)
        cache = KVCache(model, batch_size=2, max_len=8, memory_len=16)
        steps = [model(decoder_ids[:, :1], cache=cache, memory=memory)]
        steps += [model(decoder_ids[:, t : t + 1], cache=cache) for t in range(1, 8)]
    assert (torch.cat(steps, dim=1) - full).abs().max().item() < 1e-4


def test_bare_bart_model_checkpoint_loads(tmp_path: Path) -> None:
    """BartModel (as facebook/bart-base is published): no model. prefix, no logits bias (zero)."""
    hf_model = save_hf_model("bart", "AutoModel", tmp_path)
    model = zoo.from_pretrained(tmp_path, progress=False)
    assert torch.equal(model.lm_head.final_logits_bias, torch.zeros(1, VOCAB))
    ids, mask = padded_batch(length=12, pad_id=1, seed=4)
    decoder_ids = _decoder_ids()
    with torch.no_grad():
        expected = hf_model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).last_hidden_state
        got = model(decoder_ids, memory=model.encode(ids, attention_mask=mask), hidden=True)
    assert (got - expected).abs().max().item() < 1e-4


def test_save_pretrained_round_trip_through_transformers(checkpoint, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, folder = checkpoint
    model = zoo.from_pretrained(folder, progress=False)
    zoo.save_pretrained(model, tmp_path)
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    ids, mask = padded_batch(length=12, pad_id=1, seed=9)
    decoder_ids = _decoder_ids()
    with torch.no_grad():
        expected = reloaded(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        got = model(decoder_ids, memory=model.encode(ids, attention_mask=mask))
    assert (got - expected).abs().max().item() < 1e-4


def test_bart_presets_parameter_counts() -> None:
    """transformers' BartForConditionalGeneration (final_logits_bias is a buffer): 139,420,416 and 406,291,456."""
    assert zoo.count_params("bart-base").total == 139_420_416
    assert zoo.count_params("bart-large").total == 406_291_456

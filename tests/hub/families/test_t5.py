"""T5: tiny checkpoints saved by transformers load into zoo with the same outputs.

Encoder hidden states (a padded row) and decoder logits within 1e-4 in float32; greedy
generation equal to transformers' ``generate``; cached decoding equal to the full
forward at every step; save_pretrained written back and read by transformers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import zoo
from tests.hub.encoder_checkpoints import VOCAB, padded_batch, save_hf_model

transformers = pytest.importorskip("transformers")
NEW = 12


@pytest.fixture(scope="module", params=["t5", "t5_gated"])
def checkpoint(request, tmp_path_factory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp(request.param)
    return save_hf_model(request.param, "AutoModelForSeq2SeqLM", folder), folder


def _decoder_ids(length: int = 9) -> torch.Tensor:
    return torch.randint(2, VOCAB, (2, length), generator=torch.Generator().manual_seed(5))


def test_encoder_states_and_logits_match_with_padding(checkpoint) -> None:  # type: ignore[no-untyped-def]
    hf_model, folder = checkpoint
    model = zoo.from_pretrained(folder, progress=False)
    assert model.hf_model_type == "t5"
    ids, mask = padded_batch(length=30)  # 30 tokens cross max_distance 12: log and clipped buckets
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
    ids, mask = padded_batch(length=16, seed=7)
    with torch.no_grad():
        reference = hf_model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            eos_token_id=None,
        )
    got = zoo.generate(model, ids, attention_mask=mask, max_new_tokens=NEW)
    assert torch.equal(got, reference)


def test_cached_decoding_equals_full_forward(checkpoint) -> None:  # type: ignore[no-untyped-def]
    from zoo.model.cache import KVCache

    _, folder = checkpoint
    model = zoo.from_pretrained(folder, progress=False)
    ids, mask = padded_batch(length=16, seed=8)
    decoder_ids = _decoder_ids(length=8)
    with torch.no_grad():
        memory = model.encode(ids, attention_mask=mask)
        full = model(decoder_ids, memory=memory)
        cache = KVCache(model, batch_size=2, max_len=8, memory_len=16)
        steps = [model(decoder_ids[:, :1], cache=cache, memory=memory)]
        steps += [model(decoder_ids[:, t : t + 1], cache=cache) for t in range(1, 8)]
    assert (torch.cat(steps, dim=1) - full).abs().max().item() < 1e-4


def test_save_pretrained_round_trip_through_transformers(checkpoint, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, folder = checkpoint
    model = zoo.from_pretrained(folder, progress=False)
    zoo.save_pretrained(model, tmp_path)
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    ids, mask = padded_batch(length=12, seed=9)
    decoder_ids = _decoder_ids()
    with torch.no_grad():
        expected = reloaded(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        got = model(decoder_ids, memory=model.encode(ids, attention_mask=mask))
    assert (got - expected).abs().max().item() < 1e-4


def test_t5_presets_parameter_counts() -> None:
    """transformers' T5ForConditionalGeneration (tied embeddings): 60,506,624 and 222,903,552."""
    assert zoo.count_params("t5-small").total == 60_506_624
    assert zoo.count_params("t5-base").total == 222_903_552

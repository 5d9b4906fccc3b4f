"""Positions under padding, against transformers: a decoder's uncached forward with a
left-padded attention_mask numbers real tokens (transformers' generate passes
``position_ids = attention_mask.cumsum(-1) - 1``), an encoder numbers slots (BertModel)."""

from __future__ import annotations

import warnings

import pytest
import torch

import zoo
from tests.hub.conftest import VOCAB

transformers = pytest.importorskip("transformers")

LENGTHS = (14, 5, 9)


def _left_padded(pad_id: int, vocab: int = VOCAB) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    rows = [torch.randint(3, vocab, (n,), generator=gen) for n in LENGTHS]
    width = max(LENGTHS)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = row
        mask[i, width - len(row) :] = 1
    return rows, ids, mask


@pytest.mark.parametrize("family", ["gpt2", "llama", "mistral", "mamba"])
def test_left_padded_decoder_rows_match_transformers_on_each_row_alone(family, hf_checkpoints):
    hf_model, folder = hf_checkpoints[family]
    model = zoo.from_pretrained(folder, dtype="float32", progress=False)
    rows, ids, mask = _left_padded(pad_id=0)
    with torch.no_grad():
        got = model(ids, attention_mask=mask)  # (B, T, vocab)
        for i, row in enumerate(rows):
            expected = hf_model(row[None]).logits[0]  # (n, vocab)
            torch.testing.assert_close(got[i, -len(row) :], expected, atol=1e-4, rtol=1e-4)


def test_left_padded_llama_matches_transformers_with_generates_position_ids(hf_checkpoints):
    hf_model, folder = hf_checkpoints["llama"]
    model = zoo.from_pretrained(folder, dtype="float32", progress=False)
    _, ids, mask = _left_padded(pad_id=0)
    position_ids = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)  # as transformers' generate
    real = mask.bool()
    with torch.no_grad():
        expected = hf_model(ids, attention_mask=mask, position_ids=position_ids).logits
        torch.testing.assert_close(model(ids, attention_mask=mask)[real], expected[real], atol=1e-4, rtol=1e-4)


def test_left_padded_bert_keeps_transformers_slot_positions(tmp_path):
    transformers.logging.set_verbosity_error()
    config = transformers.BertConfig(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=40,
    )
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.BertModel(config).eval()
    hf.save_pretrained(tmp_path)
    model = zoo.from_pretrained(tmp_path, progress=False)
    _, ids, mask = _left_padded(pad_id=0, vocab=99)
    real = mask.bool()
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask).last_hidden_state  # positions: arange
        torch.testing.assert_close(model(ids, attention_mask=mask)[real], expected[real], atol=1e-4, rtol=1e-4)

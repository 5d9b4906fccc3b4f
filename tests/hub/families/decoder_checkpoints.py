"""Tiny random transformers decoders (BLOOM, MPT) saved by transformers, and the checks the
ALiBi families share: logits with a left-padded batch, cached decode, save round trip."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from tests.generation_checks import check_left_padded_decode

VOCAB = 96


def save_hf_decoder(model_type: str, config: dict[str, Any], folder: Path, seed: int = 0):  # type: ignore[no-untyped-def]
    """A random AutoModelForCausalLM of ``model_type``, weights perturbed (norms and biases
    not trivial), saved to ``folder``."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_config = transformers.AutoConfig.for_model(model_type, **config)
        model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    model.save_pretrained(folder)
    return model


def left_padded(lengths: tuple[int, ...] = (12, 5, 9), seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """ids (B, T) left-padded with token 0 and the attention_mask marking real tokens."""
    gen = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, width - n :] = torch.randint(3, VOCAB, (n,), generator=gen)
        mask[i, width - n :] = 1
    return ids, mask


def check_logits_with_padding(hf_model: Any, folder: Path) -> None:
    """zoo's logits equal transformers' on every real token of a left-padded batch (1e-4)."""
    model = zoo.from_pretrained(folder, dtype="float32", progress=False)
    ids, mask = left_padded()
    real = mask.bool()
    with torch.no_grad():
        expected = hf_model(input_ids=ids, attention_mask=mask).logits  # (B, T, vocab)
        got = model(ids, attention_mask=mask)
    assert got.shape == expected.shape
    assert (got[real] - expected[real]).abs().max().item() < 1e-4


def check_cached_decode(folder: Path) -> None:
    """Left-padded prefill and decode steps give each row the full forward's logits."""
    model = zoo.from_pretrained(folder, dtype="float32", progress=False)
    check_left_padded_decode(model, VOCAB)


def check_save_round_trip(hf_model: Any, folder: Path, out: Path) -> None:
    """zoo.save_pretrained writes a checkpoint transformers loads with the same logits."""
    transformers = pytest.importorskip("transformers")
    model = zoo.from_pretrained(folder, dtype="float32", progress=False)
    zoo.save_pretrained(model, out)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    ids, mask = left_padded(seed=4)
    real = mask.bool()
    with torch.no_grad():
        a = reloaded(input_ids=ids, attention_mask=mask).logits
        b = hf_model(input_ids=ids, attention_mask=mask).logits
    assert (a[real] - b[real]).abs().max().item() < 1e-5

"""Bidirectional masks: no causality, and ModernBERT's local windows (|q - k| <= window // 2)."""

import pytest
import torch

from zoo.specs.visibility import visible_keys as visible


def test_bidirectional_sees_every_filled_key() -> None:
    t = torch.arange(5)
    assert visible(t, t, None, causal=False).all()
    keys = torch.tensor([0, 1, -1])  # an empty slot is never visible
    assert visible(t, keys, None, causal=False)[0, 0].sum(-1).tolist() == [2] * 5


def test_bidirectional_window_matches_transformers_overlay() -> None:
    masking_utils = pytest.importorskip("transformers.masking_utils")
    t = torch.arange(300)
    ours = visible(t, t, 128, causal=False)[0, 0]  # (T, S)
    overlay = masking_utils.sliding_window_bidirectional_overlay(128 // 2)  # ModernBERT: config.sliding_window = 64
    theirs = overlay(0, 0, t[:, None], t[None, :])
    assert torch.equal(ours, theirs)
    assert ours[150].sum().item() == 129  # 64 each side and the query


def test_bidirectional_padding_hides_pad_keys_only() -> None:
    t = torch.arange(4)
    valid = torch.tensor([[True, True, True, True], [True, True, False, False]])
    mask = visible(t, t, None, valid, causal=False)[:, 0]  # (B, T, S)
    assert mask[0].all()
    assert mask[1, :2].tolist() == [[True, True, False, False]] * 2
    assert mask[1, 3, :2].tolist() == [True, True]  # a pad query (output unused) still sees real keys

"""The chunked WKV against the token-by-token recurrence transformers runs."""

from __future__ import annotations

import pytest
import torch
from rwkv_helpers import deterministic  # noqa: F401 (fixture)
from zoo_rwkv.wkv import CHUNK, empty_state, wkv, wkv_reference


def _inputs(B: int, T: int, C: int) -> tuple[torch.Tensor, ...]:
    w = -torch.exp(torch.randn(C))  # (C,)
    u = torch.randn(C)  # (C,)
    k = 4 * torch.randn(B, T, C)  # large keys: the max-trick matters
    v = torch.randn(B, T, C)
    return w, u, k, v


@pytest.mark.parametrize("T", [1, 2, 5, CHUNK + 7])
def test_chunked_equals_the_recurrence(T):
    w, u, k, v = _inputs(2, T, 8)
    out, _ = wkv(w, u, k, v, None, empty_state(2, 8, torch.device("cpu")))
    torch.testing.assert_close(out, wkv_reference(w, u, k, v), atol=1e-5, rtol=1e-5)


def test_carried_state_continues_the_sequence():
    w, u, k, v = _inputs(2, CHUNK + 30, 8)
    out, state = wkv(w, u, k[:, :5], v[:, :5], None, empty_state(2, 8, torch.device("cpu")))
    parts = [out]
    out, state = wkv(w, u, k[:, 5 : CHUNK + 17], v[:, 5 : CHUNK + 17], None, state)  # a prompt after a prompt
    parts.append(out)
    for t in range(CHUNK + 17, CHUNK + 30):  # then one token at a time, as decoding does
        out, state = wkv(w, u, k[:, t : t + 1], v[:, t : t + 1], None, state)
        parts.append(out)
    torch.testing.assert_close(torch.cat(parts, dim=1), wkv_reference(w, u, k, v), atol=1e-5, rtol=1e-5)


def test_padding_changes_nothing():
    w, u, k, v = _inputs(2, 12, 8)
    valid = torch.ones(2, 12, dtype=torch.bool)
    valid[1, :4] = False
    k[1, :4], v[1, :4] = 50.0, 1e3  # garbage at the pads must not leak
    out, _ = wkv(w, u, k, v, valid, empty_state(2, 8, torch.device("cpu")))
    torch.testing.assert_close(out[1, 4:], wkv_reference(w, u, k[1:, 4:], v[1:, 4:])[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[0], wkv_reference(w, u, k[:1], v[:1])[0], atol=1e-5, rtol=1e-5)

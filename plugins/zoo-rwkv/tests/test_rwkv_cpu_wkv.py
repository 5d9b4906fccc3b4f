"""The fused WKV loop (``zoo_rwkv.cpu_wkv``, implementation ``cpu-scan``) against the reference:
the WKV alone (large keys, a carried state, padding), the model's logits to 1e-5 in float32,
and a prefill then decode steps equal to the full forward."""

from __future__ import annotations

import pytest
import torch
from rwkv_helpers import TINY, checkpoint, deterministic  # noqa: F401 (fixtures)
from zoo_rwkv import cpu_wkv
from zoo_rwkv.wkv import CHUNK, empty_state, wkv

import zoo
from zoo.components.kernels import implementations, preferring
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill

CPU = torch.device("cpu")


def _inputs(B: int, T: int, C: int) -> tuple[torch.Tensor, ...]:
    w, u = -torch.exp(torch.randn(C)), torch.randn(C)  # (C,)
    return w, u, 4 * torch.randn(B, T, C), torch.randn(B, T, C)  # large keys: the max-trick matters


def test_the_fused_wkv_builds_with_the_dev_install():
    """A C++ compiler and ninja are there (as for zoo's cpu_scan): no silent skip below."""
    assert cpu_wkv.EXTENSION.available()


def test_the_loop_equals_the_reference_scan_from_a_carried_state():
    w, u, k, v = _inputs(2, CHUNK + 9, 70)  # channels: one full block of 64 and a partial one
    _, state = wkv(w, u, k[:, :5], v[:, :5], None, empty_state(2, 70, CPU))  # a prompt before
    before = tuple(t.clone() for t in state)
    got, got_state = cpu_wkv.wkv_scan(w, u, k[:, 5:], v[:, 5:], None, state)
    expected, expected_state = wkv(w, u, k[:, 5:], v[:, 5:], None, state)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(state, before, strict=True))  # the input state is left alone
    step = (w, u, k[:, -1:] * 0.5, v[:, -1:])  # the states differ in form (num, den, max), not in meaning
    torch.testing.assert_close(
        wkv(*step, None, got_state)[0], wkv(*step, None, expected_state)[0], atol=1e-5, rtol=1e-5
    )


def test_padding_leaves_the_state_as_it_was():
    w, u, k, v = _inputs(2, 12, 8)
    valid = torch.ones(2, 12, dtype=torch.bool)
    valid[1, :4] = False
    k[1, :4], v[1, :4] = 50.0, 1e3  # garbage at the pads must not leak
    got, _ = cpu_wkv.wkv_scan(w, u, k, v, valid, empty_state(2, 8, CPU))
    expected, _ = wkv(w, u, k, v, valid, empty_state(2, 8, CPU))
    torch.testing.assert_close(got[:, 4:], expected[:, 4:], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[0], expected[0], atol=1e-5, rtol=1e-5)


def _model(folder, impl: str):  # type: ignore[no-untyped-def]
    with preferring(impl):
        return zoo.from_pretrained(folder, progress=False)


@pytest.mark.parametrize("impl", ["cpu-scan", "reference"])
def test_the_model_with_the_loop_equals_the_reference(checkpoint, impl):
    fast, reference = _model(checkpoint[1], "cpu-scan"), _model(checkpoint[1], "reference")
    ids = torch.randint(0, TINY["vocab_size"], (2, 75))  # more than one reference chunk
    with torch.no_grad():
        expected = reference(ids)  # (B, T, V)
        torch.testing.assert_close(fast(ids), expected, atol=1e-5, rtol=1e-5)
        model = fast if impl == "cpu-scan" else reference
        cache = KVCache(model, batch_size=2, max_len=75)
        steps = [prefill(model, ids[:, :3], cache), prefill(model, ids[:, 3:72], cache)]
        steps += [decode_step(model, ids[:, t : t + 1], cache) for t in range(72, 75)]
    torch.testing.assert_close(torch.stack(steps, dim=1), expected[:, [2, 71, 72, 73, 74]], atol=1e-5, rtol=1e-5)
    stepped = ", rwkv-ffn: reference"  # the model that decoded: its channel mix's step (cpu-step is not asked for)
    assert implementations(fast) == "rwkv: cpu-scan" + (stepped if impl == "cpu-scan" else "")
    assert implementations(reference) == "rwkv: reference" + ("" if impl == "cpu-scan" else stepped)

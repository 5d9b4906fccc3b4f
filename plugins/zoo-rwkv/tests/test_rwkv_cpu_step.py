"""The fused decode step (``zoo_rwkv.cpu_step``, implementation ``cpu-step``) equals the
reference step: prefill then decode steps give the reference model's logits to 1e-5 in
float32 and the full forward's, left-padded rows included."""

from __future__ import annotations

import pytest
import torch
from rwkv_helpers import TINY, checkpoint, deterministic  # noqa: F401 (fixtures)
from zoo_rwkv import cpu_step

import zoo
from zoo.components.kernels import implementations, preferring  # the harness's --impl, as zoo's tests set it
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, left_pad, prefill

pytest.importorskip("transformers")


def _loaded(folder, impl: str) -> torch.nn.Module:  # type: ignore[no-untyped-def]
    with preferring(impl):
        return zoo.from_pretrained(folder, progress=False).eval()


def _stepped(model: torch.nn.Module, ids: torch.Tensor, split: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    cache = KVCache(model, batch_size=ids.shape[0], max_len=ids.shape[1])
    out = [prefill(model, ids[:, :split], cache, None if mask is None else mask[:, :split])]  # (B, V)
    out += [decode_step(model, ids[:, t : t + 1], cache) for t in range(split, ids.shape[1])]
    return torch.stack(out, dim=1)  # (B, T - split + 1, V)


def test_the_step_builds_with_the_dev_install():
    assert cpu_step.EXTENSION.available()


def test_the_fused_step_equals_the_reference_step_and_the_full_forward(checkpoint):
    folder = checkpoint[1]
    reference, fast = _loaded(folder, "reference"), _loaded(folder, "auto")
    ids = torch.randint(0, TINY["vocab_size"], (2, 20))  # (B, T)
    with torch.no_grad():
        full = reference(ids)  # (B, T, V)
        expected, got = _stepped(reference, ids, 5), _stepped(fast, ids, 5)
    assert implementations(fast) == "rwkv: cpu-scan+cpu-step, rwkv-ffn: cpu-step"  # auto: prompt and steps
    assert implementations(reference) == "rwkv: reference, rwkv-ffn: reference"
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, full[:, 4:], atol=1e-5, rtol=1e-5)


def test_the_fused_step_after_a_left_padded_prefill(checkpoint):
    folder = checkpoint[1]
    reference, fast = _loaded(folder, "reference"), _loaded(folder, "cpu-step")
    ids, mask = left_pad([[5, 9, 3, 7, 1], [4, 6]], pad_token_id=0)  # (B, 5)
    more = torch.randint(1, TINY["vocab_size"], (2, 6))  # (B, 6)
    ids, mask = torch.cat([ids, more], dim=1), torch.cat([mask, torch.ones_like(more)], dim=1)
    with torch.no_grad():
        expected, got = _stepped(reference, ids, 5, mask), _stepped(fast, ids, 5, mask)
    assert implementations(fast) == "rwkv: cpu-step, rwkv-ffn: cpu-step"
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_a_bfloat16_model_runs_the_fused_step_on_its_bfloat16_cache(checkpoint, monkeypatch):
    """bfloat16 weights and cache: the token-shift states are bfloat16 (the kernel stores the
    bfloat16 inputs exactly), the WKV sums float32, so both mixes run the kernel, in float32 where
    the reference rounds to bfloat16 between ops: logits agree to bfloat16's precision."""
    calls: list[int] = []
    original = cpu_step.shift_mix

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(cpu_step, "shift_mix", counted)
    models = []
    for impl in ("reference", "auto"):
        with preferring(impl):
            models.append(zoo.from_pretrained(checkpoint[1], progress=False, dtype="bfloat16").eval())
    ids = torch.randint(0, TINY["vocab_size"], (2, 12))  # (B, T)
    with torch.no_grad():
        expected, got = (_stepped(model, ids, 4).float() for model in models)
    assert len(calls) == 2 * TINY["num_hidden_layers"] * (12 - 4)  # time and channel mix, every layer and step
    torch.testing.assert_close(got, expected, atol=5e-2, rtol=5e-2)

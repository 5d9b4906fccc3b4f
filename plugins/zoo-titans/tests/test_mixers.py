"""Titans mixers in a model: cached decode equals the full forward, the cache holds exactly
the declared state (counted by hand here), the memory module equals the paper's loop, and
the presets' parameters are counted by hand."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_memory_rule import paper_loop
from titans_helpers import TINY_VOCAB, _deterministic, tiny  # noqa: F401 (an autouse fixture)

import zoo
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill


@pytest.mark.parametrize("kind", ["titans-mal", "titans-mag"])
@pytest.mark.parametrize(("chunk", "split"), [(1, 5), (4, 4), (4, 6), (3, 1)])
def test_prefill_and_decode_equal_the_full_forward(kind, chunk, split):
    model = zoo.build(tiny(kind, chunk_size=chunk), seed=0).eval()
    ids = torch.randint(0, TINY_VOCAB, (2, 13))
    with torch.inference_mode():  # no autograd at all: the memory's gradients are closed-form
        full = model(ids)
        cache = KVCache(model, batch_size=2, max_len=13)
        steps = [prefill(model, ids[:, :split], cache)]
        steps += [decode_step(model, ids[:, t : t + 1], cache) for t in range(split, 13)]
    torch.testing.assert_close(torch.stack(steps, dim=1), full[:, split - 1 :], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("chunk", [1, 4])
def test_state_bytes_are_counted_by_hand(chunk):
    """MAL, 2 heads of 8, MLP 8 -> 16 -> 8: per head 2 * 128 weights, per layer and set 512
    floats; sets: weights, momentum (+ the chunk's anchor when chunk > 1), float32; the conv
    window 3 * 16 channels x 3 taps in the cache's dtype (bfloat16); 2 layers; batch 3."""
    spec = tiny("titans-mal", chunk_size=chunk)
    sets = 3 if chunk > 1 else 2
    per_layer = sets * 512 * 4 + 48 * 3 * 2
    expected = 3 * 2 * per_layer
    assert zoo.kv_cache_bytes(spec, batch_size=3, seq_len=1000, dtype="bfloat16") == expected
    model = zoo.build(spec, seed=0)
    assert KVCache(model, batch_size=3, max_len=7, dtype=torch.bfloat16).nbytes == expected


def test_the_memory_module_is_the_paper_loop():
    """chunk 1: the module's q, k, v and gates through the test's per-token loop, then its output path."""
    model = zoo.build(tiny("titans-mal", chunk_size=1), seed=0).eval()
    memory = model.stateful_modules()[0][1].memory
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        q, k, v = memory._project(x, None)
        gates = memory._gates(x, None)
        weights = [w.expand(2, *w.shape) for w in memory.memory]
        y, _, _ = paper_loop(weights, k, v, q, gates.log_eta.exp(), gates.theta, 1 - gates.log_keep.exp())
        y = F.rms_norm(y, (8,), eps=memory.eps) * memory.norm_weight
        expected = memory.o_proj(y.transpose(1, 2).reshape(2, 7, 16) * F.silu(memory.gate_proj(x)))
        torch.testing.assert_close(memory(x, None, None), expected, atol=1e-5, rtol=1e-5)


def test_left_padding_leaves_the_memory_untouched():
    model = zoo.build(tiny("titans-mal", chunk_size=1), seed=0).eval()
    ids = torch.randint(1, TINY_VOCAB, (1, 6))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        plain = prefill(model, ids, KVCache(model, batch_size=1, max_len=9))
        cache = KVCache(model, batch_size=1, max_len=9)
        torch.testing.assert_close(prefill(model, padded, cache, attention_mask=mask), plain)


def test_the_memory_trains():
    """The closed-form update is differentiable: the outer loop learns M_0 and the projections."""
    model = zoo.build(tiny("titans-mag"), seed=0)
    ids = torch.randint(0, TINY_VOCAB, (2, 9))
    logits = model(ids)
    F.cross_entropy(logits[:, :-1].reshape(-1, TINY_VOCAB), ids[:, 1:].reshape(-1)).backward()
    memory = model.stateful_modules()[0][1].memory
    assert all(w.grad is not None and w.grad.abs().sum() > 0 for w in memory.memory)


def test_the_titans_preset_is_counted_by_hand():
    """Qwen3-0.6B's body (embeddings 151936 x 1024 tied, SwiGLU 3 x 1024 x 3072, 2 norms of
    1024 per layer, a final norm) and per layer MAG: GQA (q 1024x2048, k and v 1024x1024,
    o 2048x1024, q/k norms 128 each), the memory (qkv 1024x6144, conv 6144x4, gates 1024x48
    and 48 biases, gate 1024x2048, norm 128, MLP 16 x (128x256 + 256x128), o 2048x1024) and
    two gate scales of 1024."""
    attention = 1024 * 2048 + 2 * 1024 * 1024 + 2048 * 1024 + 2 * 128
    memory = 1024 * 6144 + 6144 * 4 + 1024 * 48 + 48 + 1024 * 2048 + 128 + 16 * 2 * 128 * 256 + 2048 * 1024
    layer = attention + memory + 2 * 1024 + 3 * 1024 * 3072 + 2 * 1024
    expected = 151936 * 1024 + 28 * layer + 1024
    assert zoo.count_params(zoo.spec("titans")).total == expected
    assert sum(p.numel() for p in zoo.build("titans", device="meta").parameters()) == expected

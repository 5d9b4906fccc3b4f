"""Infini-attention against a plain reference that loops over segments (arXiv 2404.07143)."""

from __future__ import annotations

import pytest
import torch

import zoo
from tests.generation_checks import check_compiled_decode, check_left_padded_decode
from zoo.analysis.counts import cache_bytes, state_bytes
from zoo.components.feature_state import EPS, feature_map
from zoo.components.infini_attention import InfiniAttention
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, left_pad, prefill

VOCAB, H, D, S = 61, 2, 8, 4


def _spec(update: str = "linear", n_layers: int = 1, positional: str = "none") -> zoo.ModelSpec:
    return zoo.ModelSpec.model_validate(
        {
            "name": f"infini-{update}-{n_layers}",
            "vocab_size": VOCAB,
            "d_model": 16,
            "n_layers": n_layers,
            "max_seq_len": 64,
            "norm": {"kind": "rmsnorm"},
            "positional": {"kind": positional},
            "block": {"kind": "pre_norm"},
            "ffn": {"kind": "none"},
            "attention": {"kind": "infini", "n_heads": H, "head_dim": D, "segment": S, "update": update},
        }
    )


def _model(update: str = "linear", n_layers: int = 1, positional: str = "none") -> zoo.model.build.ZooModel:
    model = zoo.build(_spec(update, n_layers, positional), seed=0).eval()
    with torch.no_grad():  # a gate away from 0.5 per head, so swapped paths show
        for layer in model.layers:
            layer.attention.gate.copy_(torch.tensor([-1.0, 2.0]))
    return model


def reference(mixer: InfiniAttention, x: torch.Tensor, delta: bool) -> torch.Tensor:
    """The paper's algorithm, segment by segment: local causal softmax, memory read with
    the memory of the previous segments, then the segment's write."""
    B, T, _ = x.shape
    q = mixer.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
    k = mixer.k_proj(x).view(B, T, H, D).transpose(1, 2)
    v = mixer.v_proj(x).view(B, T, H, D).transpose(1, 2)
    mem, z = torch.zeros(B, H, D, D), torch.zeros(B, H, D)
    beta = torch.sigmoid(mixer.gate)[None, :, None, None]
    outputs = []
    for a in range(0, T, S):
        qs, ks, vs = q[:, :, a : a + S], k[:, :, a : a + S], v[:, :, a : a + S]
        L = qs.shape[2]
        scores = (qs @ ks.transpose(-1, -2)) / D**0.5
        scores = scores.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
        local = scores.softmax(-1) @ vs
        sq, sk = feature_map(qs), feature_map(ks)
        read = (sq @ mem) / ((sq @ z[..., None]) + EPS)
        outputs.append(beta * read + (1 - beta) * local)
        if L == S:
            if delta:
                vs = vs - (sk @ mem) / ((sk @ z[..., None]) + EPS)
            mem = mem + sk.transpose(-1, -2) @ vs
            z = z + sk.sum(2)
    y = torch.cat(outputs, dim=2).transpose(1, 2).reshape(B, T, H * D)
    return mixer.o_proj(y)


@pytest.mark.parametrize("update", ["linear", "delta"])
def test_forward_equals_the_segment_loop_reference(update):
    mixer = _model(update).layers[0].attention
    x = torch.randn(2, 11, 16)  # two full segments and a partial one
    with torch.no_grad():
        torch.testing.assert_close(mixer(x), reference(mixer, x, update == "delta"), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(("update", "positional"), [("linear", "rope"), ("delta", "none")])
def test_prefill_then_steps_equal_the_full_forward_at_every_split(update, positional):
    model = _model(update, n_layers=2, positional=positional)
    ids = torch.randint(0, VOCAB, (2, 14))
    with torch.no_grad():
        full = model(ids)
    cache = KVCache(model, batch_size=2, max_len=14)
    last = [prefill(model, ids[:, a:b], cache) for a, b in ((0, 3), (3, 9))]  # chunks across segment ends
    last += [decode_step(model, ids[:, t : t + 1], cache) for t in range(9, 14)]
    torch.testing.assert_close(torch.stack(last, dim=1), full[:, [2, 8, 9, 10, 11, 12, 13]], atol=1e-5, rtol=1e-5)


def test_left_padded_rows_equal_their_unpadded_runs_cached_and_uncached():
    model = _model("delta", n_layers=2)
    prompts, follow = check_left_padded_decode(model, VOCAB, n_follow=6)  # cached
    ids, mask = left_pad(prompts, pad_token_id=3)
    with torch.no_grad():
        uncached = model(ids, attention_mask=mask)  # (B, 7, vocab)
    for row, prompt in enumerate(prompts):
        alone = torch.tensor([prompt + follow[row].tolist()])
        with torch.no_grad():
            full = model(alone)[0]
        torch.testing.assert_close(uncached[row, 7 - len(prompt) :], full[: len(prompt)], atol=1e-5, rtol=1e-5)


def test_reset_forgets_the_memory():
    model = _model()
    first, second = torch.randint(0, VOCAB, (1, 10)), torch.randint(0, VOCAB, (1, 6))
    cache = KVCache(model, batch_size=1, max_len=10)
    prefill(model, first, cache)
    assert cache.layers[0]["z"].abs().sum() > 0
    cache.reset()
    assert cache.layers[0]["z"].abs().sum() == 0 and cache.layers[0]["mem"].abs().sum() == 0
    with torch.no_grad():
        expected = model(second)[:, -1]
    torch.testing.assert_close(prefill(model, second, cache), expected, atol=1e-5, rtol=1e-5)


def test_state_bytes_come_from_the_declaration():
    spec = _spec(n_layers=2)
    per_layer = (H * D * D + H * D) * 4  # M and z, float32
    assert state_bytes(spec, dtype="float32") == 2 * per_layer
    ring = 2 * H * S * D * 2  # k and v, at most `segment` slots, bfloat16
    assert cache_bytes(spec, batch_size=1, context_len=1000, dtype="bfloat16").token == 2 * ring
    assert cache_bytes(spec, batch_size=1, context_len=2, dtype="bfloat16").token == 2 * ring // 2
    model = zoo.build(spec, seed=0)
    cache = KVCache(model, batch_size=3, max_len=40, dtype=torch.float32)
    assert cache.nbytes == cache_bytes(spec, batch_size=3, context_len=40, dtype="float32").total


def test_compiled_decode_step_equals_eager_without_recompiling():
    check_compiled_decode(
        _model("delta"), [[5, 9, 2, 7, 7, 1], [11, 4], [8, 8, 20]], 5
    )  # crosses a segment end in every row


def test_flops_grow_with_the_segment_not_the_context():
    spec = _spec()
    assert zoo.flops_per_token(spec, 100) == zoo.flops_per_token(spec, 100_000)

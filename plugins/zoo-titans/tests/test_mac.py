"""titans-mac against a per-segment loop written from the paper's equations 21-25 (Behrouz et
al., 2025): retrieval with the memory before the segment, attention over [persistent |
retrieved | segment] by an explicit softmax per token, the memory's write of the attention
output by the per-token loop of test_memory_rule (autograd gradients at the segment's first
weights), output y * M*(y). Then decode, state bytes by hand, the preset's parameters."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_memory_rule import paper_loop
from titans_helpers import TINY_VOCAB, _deterministic, tiny  # noqa: F401 (an autouse fixture)

import zoo
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill
from zoo.specs.interfaces import Positions


def heads(x, n, hd):
    return x.view(*x.shape[:2], n, hd).transpose(1, 2)  # (B, n, T, hd)


def segment_attention(mac, xs, h):
    """Eq. 23: token i attends to the persistent tokens, h_0..h_i and S_0..S_i (softmax per token)."""
    B, n, _ = xs.shape
    H, G, hd = mac.n_heads, mac.n_kv_heads, mac.head_dim
    context = torch.cat([mac.persistent.expand(B, -1, -1), h, xs], dim=1)  # (B, Np + 2n, d)
    q = heads(mac.q_proj(xs), H, hd)
    k, v = mac.kv_proj(context).chunk(2, dim=-1)
    k, v = heads(k, G, hd), heads(v, G, hd)
    if mac.q_norm is not None:
        q, k = mac.q_norm(q), mac.k_norm(k)
    Np = mac.persistent.shape[0]
    out = torch.zeros(B, H, n, hd)
    for i in range(n):
        keys = list(range(Np)) + [Np + j for j in range(i + 1)] + [Np + n + j for j in range(i + 1)]
        for head in range(H):
            g = head // (H // G)
            scores = torch.einsum("bd,bkd->bk", q[:, head, i], k[:, g, keys]) / hd**0.5
            weights = torch.softmax(scores, dim=-1)  # (B, keys)
            out[:, head, i] = (weights[:, :, None] * v[:, g, keys]).sum(1)
    return mac.o_proj(out.transpose(1, 2).reshape(B, n, H * hd))


def paper_mac(mac, x):
    mem, seg = mac.memory, mac.segment_len
    B, T, _ = x.shape
    H, hd = mac.n_heads, mac.head_dim
    weights = [w.expand(B, *w.shape).clone() for w in mem.memory]  # M_0 per sequence
    momentum = [torch.zeros_like(w) for w in weights]
    window = torch.zeros(B, mem.conv.in_channels, mem.conv.kernel_size[0] - 1)
    outs = []
    for s0 in range(0, T, seg):
        xs = x[:, s0 : s0 + seg]
        n = xs.shape[1]
        r = F.normalize(heads(mac.retrieve_q(xs), H, hd), dim=-1, eps=mem.eps)  # eq. 21: q = S W_Q
        h = torch.zeros(B, H, n, hd)
        for b in range(B):
            for head in range(H):
                for i in range(n):  # eq. 22: h = M*_{t-1}(q), the memory before the segment, no update
                    z = r[b, head, i]
                    for depth, w in enumerate(weights):
                        z = w[b, head] @ z
                        z = F.silu(z) if depth < len(weights) - 1 else z
                    h[b, head, i] = z
        y = segment_attention(mac, xs, mac.retrieve_o(h.transpose(1, 2).reshape(B, n, H * hd)))
        q, k, v = mem._project(y, window)  # eq. 24: the memory writes y (its conv continues across segments)
        g = mem._gates(y, None)
        read, weights, momentum = paper_loop(
            weights, k, v, q, g.log_eta.exp(), g.theta, 1 - g.log_keep.exp(), chunk=seg, momentum=momentum
        )
        read = F.rms_norm(read, (hd,), eps=mem.eps) * mem.norm_weight
        m = mem.o_proj(read.transpose(1, 2).reshape(B, n, H * hd) * F.silu(mem.gate_proj(y)))
        outs.append(y * m)  # eq. 25
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("seg", [1, 3, 4])
def test_mac_is_the_papers_segment_loop(seg):
    model = zoo.build(tiny("titans-mac", chunk_size=seg), seed=0).eval()
    mac = model.stateful_modules()[0][1]
    x = torch.randn(2, 10, 32)
    with torch.no_grad():
        got = mac(x, Positions(torch.arange(10).expand(2, -1), positional=None))  # no rotation: the paper's form
        torch.testing.assert_close(got, paper_mac(mac, x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("seg", "split"), [(1, 5), (4, 4), (4, 6), (3, 1)])
def test_prefill_and_decode_equal_the_full_forward(seg, split):
    model = zoo.build(tiny("titans-mac", chunk_size=seg), seed=0).eval()
    ids = torch.randint(0, TINY_VOCAB, (2, 13))
    with torch.inference_mode():
        full = model(ids)
        cache = KVCache(model, batch_size=2, max_len=13)
        steps = [prefill(model, ids[:, :split], cache)]
        steps += [decode_step(model, ids[:, t : t + 1], cache) for t in range(split, 13)]
    torch.testing.assert_close(torch.stack(steps, dim=1), full[:, split - 1 :], atol=1e-5, rtol=1e-5)


def test_state_bytes_are_counted_by_hand():
    """2 heads of 8, MLP 8 -> 16 -> 8: 512 floats per set; 3 sets (weights, momentum, the segment's
    first weights) float32; the conv window 48 channels x 3 taps and the segment's K/V, 2 x 1 head
    x 8 slots (4 retrieved, 4 own) x 8, in the cache dtype (bfloat16); 2 layers; batch 3."""
    spec = tiny("titans-mac", chunk_size=4)
    per_layer = 3 * 512 * 4 + 48 * 3 * 2 + 2 * 8 * 8 * 2
    expected = 3 * 2 * per_layer
    assert zoo.kv_cache_bytes(spec, batch_size=3, seq_len=1000, dtype="bfloat16") == expected
    assert KVCache(zoo.build(spec, seed=0), batch_size=3, max_len=7, dtype=torch.bfloat16).nbytes == expected


def test_left_padding_is_masked():
    model = zoo.build(tiny("titans-mac", chunk_size=1), seed=0).eval()
    ids = torch.randint(1, TINY_VOCAB, (1, 6))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        plain = prefill(model, ids, KVCache(model, batch_size=1, max_len=9))
        cache = KVCache(model, batch_size=1, max_len=9)
        got = prefill(model, padded, cache, attention_mask=mask)
    torch.testing.assert_close(got, plain)


def test_chunk_size_is_the_segment():
    with pytest.raises(zoo.errors.SpecError, match="chunk_size: MAC's memory steps once per segment"):
        zoo.spec("titans-mac").override({"attention.chunk_size": 16})
    assert zoo.spec("titans-mac").override({"attention.segment_len": 64}).to_dict()["attention"]["chunk_size"] == 64


def test_the_mac_preset_is_counted_by_hand():
    """Qwen3-0.6B's body and per layer: the memory (as in the titans preset), 16 persistent
    tokens of 1024, retrieval in 1024x2048 and out 2048x1024, attention q 1024x2048, kv
    1024x2048, o 2048x1024, q/k norms 128 each."""
    memory = 1024 * 6144 + 6144 * 4 + 1024 * 48 + 48 + 1024 * 2048 + 128 + 16 * 2 * 128 * 256 + 2048 * 1024
    mac = memory + 16 * 1024 + 2 * 1024 * 2048 + 1024 * 2048 + 1024 * 2048 + 2048 * 1024 + 2 * 128
    layer = mac + 2 * 1024 + 3 * 1024 * 3072
    expected = 151936 * 1024 + 28 * layer + 1024
    assert zoo.count_params(zoo.spec("titans-mac")).total == expected
    assert sum(p.numel() for p in zoo.build("titans-mac", device="meta").parameters()) == expected

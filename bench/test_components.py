"""Each component family timed alone at realistic widths (d = 1024..2048), float32 on the host.

Components come from one-layer models built through the registry, so what is timed is what
`zoo.build` assembles. Shapes: prefill = 1 x 256 tokens; decode = 1 token over a cache of 1024.
Run: pytest bench/ --benchmark-only
"""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.model.cache import KVCache

PREFILL_T = 256
DECODE_CONTEXT = 1024


def _one_layer(arch: str, **overrides: object):
    spec = zoo.spec(arch).override({"n_layers": 1, "vocab_size": 1024, "layers": {}, **overrides})
    return zoo.build(spec, device="cpu", dtype="float32", seed=0).eval()


MODELS = {
    "llama-3.2-1b": {},  # d 2048, rmsnorm, rope (llama3 scaling), gqa 32/8 x 64, swiglu 8192
    "gpt2-medium": {},  # d 1024, layernorm, learned positions, mha 16 x 64, gelu mlp 4096
    "qwen3-0.6b": {},  # d 1024, qk-norm gqa 16/8 x 128, swiglu 3072
    "qwen3-30b-a3b": {"ffn.n_experts": 16, "ffn.top_k": 4},  # d 2048, moe top-4 of 16 experts x 768 (preset: 8 of 128)
}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return _one_layer(request.param, **MODELS[request.param])


def _x(model, tokens: int) -> torch.Tensor:
    return torch.randn(1, tokens, model.spec.d_model)  # (B, T, d)


def test_norm(benchmark, model):
    x = _x(model, PREFILL_T)
    benchmark(model.final_norm, x)


def test_positional(benchmark, model):
    positional = model.positionals[0]
    ids = torch.arange(PREFILL_T)[None]  # (1, T)
    attention = model.attention_modules[0]
    q = torch.randn(1, attention.n_heads, PREFILL_T, attention.head_dim)  # (B, H, T, D)
    k = torch.randn(1, attention.n_kv_heads, PREFILL_T, attention.head_dim)

    def apply():
        rotation = positional.rotation(ids)
        return rotation(q, k) if rotation is not None else positional.embed(_x0, ids)

    _x0 = _x(model, PREFILL_T)
    benchmark(apply)


def test_attention_prefill(benchmark, model):
    x = _x(model, PREFILL_T)
    positions = model.positions_for(torch.arange(PREFILL_T)[None])[0]
    benchmark(model.attention_modules[0], x, positions)


def test_attention_decode(benchmark, model):
    cache = KVCache(model, 1, DECODE_CONTEXT + 1)
    cache.length = DECODE_CONTEXT  # a full cache of random-enough zeros: the cost is the same
    x = _x(model, 1)
    positions = model.positions_for(torch.tensor([[DECODE_CONTEXT]]))[0]
    time = torch.tensor([DECODE_CONTEXT])

    def step():
        return model.attention_modules[0](x, positions, cache.layer(0, time))

    benchmark(step)


@pytest.mark.parametrize("tokens", [1, PREFILL_T], ids=["decode", "prefill"])
def test_ffn(benchmark, model, tokens):
    benchmark(model.layers[0].ffn, _x(model, tokens))

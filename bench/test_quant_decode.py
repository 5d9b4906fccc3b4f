"""Decode steps at batch 1 with bf16, int8 and int4 weights (pytest-benchmark).

llama-3.2-1b's widths and vocabulary, 2 layers (the LM head, 128256 x 2048, is then most of
the bytes), the three models on the same random weights. The side-by-side ratio with
interleaved rounds is bench/quant_decode.py; this file tracks each step's time.
Run: pytest bench/test_quant_decode.py --benchmark-only --benchmark-json results/bench-quant.json
(without --benchmark-json bench/conftest.py writes results/bench-components.json).
"""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill
from zoo.quant import quantize

LAYERS = 2
PROMPT = 16


@pytest.fixture(scope="module", params=["bf16", "int8", "int4"])
def decoder(request):
    spec = zoo.spec("llama-3.2-1b").override({"n_layers": LAYERS, "layers": {}})
    model = zoo.build(spec, device="cpu", dtype="bfloat16", seed=0).eval()
    with torch.no_grad():
        quantize(model, request.param)
    cache = KVCache(model, 1, 512, dtype=torch.bfloat16, device="cpu")
    prompt = torch.randint(spec.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    return model, cache, prompt


def test_decode_step(benchmark, decoder):
    model, cache, prompt = decoder
    cache.reset()
    token = prefill(model, prompt, cache).argmax(-1, keepdim=True)  # (1, 1)

    def step():
        if cache.length >= cache.max_len - 1:
            cache.reset()
            prefill(model, prompt, cache)
        return decode_step(model, token, cache)  # (1, vocab)

    benchmark.pedantic(step, rounds=20, warmup_rounds=2)

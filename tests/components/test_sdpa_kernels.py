"""Eager decode on CUDA never reaches cuDNN's attention, whose per-shape plan build dominated it."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import zoo
from tests.conftest import tiny_spec
from zoo.components.sdpa_kernels import varying_shape_kernels
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill


def test_off_cuda_the_choice_is_torchs():
    q = torch.randn(1, 4, 1, 8)
    k = v = torch.randn(1, 2, 5, 8)
    with varying_shape_kernels(q.device):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("arch", ["llama-3.2-1b", "gpt2"])  # GQA and MHA
def test_eager_cuda_decode_uses_no_cudnn_attention_and_matches_the_forward(arch):
    model = zoo.build(tiny_spec(arch), device="cuda", dtype="bfloat16", seed=0).eval()
    ids = torch.randint(0, 97, (2, 12), device="cuda")
    cache = KVCache(model, 2, 16)
    token = prefill(model, ids[:, :8], cache).argmax(-1, keepdim=True)  # (B, 1)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        logits = [decode_step(model, ids[:, t : t + 1], cache) for t in range(8, 12)]
    names = {event.key for event in prof.key_averages()}
    assert not any("cudnn_attention" in name for name in names), sorted(n for n in names if "attention" in n)
    assert token.shape == (2, 1)
    with torch.no_grad():
        full = model(ids)[:, 8:12]  # (B, 4, vocab)
    torch.testing.assert_close(torch.stack(logits, 1).float(), full.float(), atol=0.05, rtol=0.05)

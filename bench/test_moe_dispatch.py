"""MoE prefill: sorted-token grouped matmul against the per-expert loop it replaced.

One qwen3-30b-a3b mixture (d 2048, 128 experts x 768, top-8) on the host, 256 prompt
tokens, both paths timed in the same run so their ratio is what to read.
Run: pytest bench/test_moe_dispatch.py --benchmark-only --benchmark-group-by=param:dtype
"""

from __future__ import annotations

import pytest
import torch

from zoo.components.moe import MoE, MoEOptions

TOKENS = 256


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def moe(request):
    options = MoEOptions(n_experts=128, top_k=8, hidden=768)
    module = MoE(options, d_model=2048).to(getattr(torch, request.param))
    return module, torch.randn(TOKENS, 2048, dtype=module.w_up.dtype)


@pytest.mark.parametrize("path", ["grouped", "looped"])
def test_moe_prefill(benchmark, moe, path):
    module, x = moe
    weights, index = module.route(x)
    run = getattr(module, f"_experts_{path}")
    with torch.no_grad():
        benchmark(run, x, weights, index)

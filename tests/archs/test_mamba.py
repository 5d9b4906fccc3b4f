"""The mamba-130m preset: published count, state bytes, FLOPs; hybrids through layer selectors."""

from __future__ import annotations

import torch

import zoo
from zoo.analysis.counts import cache_bytes, kv_bytes_per_token, state_bytes


def test_mamba_130m_has_the_published_parameter_count():
    d, layers, vocab, inner, rank, n, k = 768, 24, 50280, 1536, 48, 16, 4
    per_layer = (
        d * 2 * inner  # in_proj
        + inner * k
        + inner  # depthwise conv1d weight and bias
        + inner * (rank + 2 * n)  # x_proj -> dt, B, C
        + rank * inner
        + inner  # dt_proj
        + inner * n
        + inner  # A_log, D
        + inner * d  # out_proj
        + d  # the block's RMSNorm
    )
    count = zoo.count_params(zoo.spec("mamba-130m"))
    assert count.total == vocab * d + layers * per_layer + d == 129_135_360  # tied LM head, norm_f
    assert count.active == count.total


def test_mamba_130m_state_is_fixed_per_sequence():
    spec = zoo.spec("mamba-130m")
    per_layer = 1536 * 4 * 4 + 1536 * 16 * 4  # conv (1536, 4) and ssm (1536, 16), float32
    assert state_bytes(spec, dtype="float32") == 24 * per_layer == 2_949_120
    # bf16 model: the conv window in the cache dtype, the SSM state float32 (transformers' cache: 2,654,208)
    assert state_bytes(spec, dtype="bfloat16") == 24 * (1536 * 4 * 2 + 1536 * 16 * 4) == 2_654_208
    assert kv_bytes_per_token(spec) == 0
    at_128k = cache_bytes(spec, batch_size=2, context_len=131_072, dtype="bfloat16")
    assert (at_128k.token, at_128k.sequence, at_128k.total) == (0, 2 * 2_654_208, 2 * 2_654_208)


def test_mamba_flops_do_not_grow_with_the_context():
    spec = zoo.spec("mamba-130m")
    assert zoo.flops_per_token(spec, 100) == zoo.flops_per_token(spec, 100_000)
    gpt2 = zoo.spec("gpt2")
    assert zoo.flops_per_token(gpt2, 100) < zoo.flops_per_token(gpt2, 1000)


def test_a_hybrid_from_layer_selectors_builds_runs_and_splits_its_cache():
    spec = zoo.ModelSpec.model_validate(
        {
            "name": "hybrid",
            "vocab_size": 97,
            "d_model": 32,
            "n_layers": 4,
            "max_seq_len": 64,
            "norm": {"kind": "rmsnorm"},
            "positional": {"kind": "rope"},
            "block": {"kind": "pre_norm"},
            "attention": {"kind": "mamba", "d_state": 4},
            "ffn": {"kind": "swiglu", "hidden": 48},
            "layers": {"1::2": {"attention": {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2, "head_dim": 8}}},
        }
    )
    assert [spec.layer(i).attention.kind for i in range(4)] == ["mamba", "gqa", "mamba", "gqa"]
    model = zoo.build(spec, seed=0).eval()
    out = zoo.generate(model, torch.tensor([[1, 2, 3]]), max_new_tokens=4)
    assert out.shape == (1, 7)
    mamba_state = 64 * 4 * 2 + 64 * 4 * 4  # conv (64, 4) in the bfloat16 cache, ssm (64, 4) float32, per mamba layer
    kv = 2 * 2 * 8 * 2  # K and V, 2 kv heads of 8, bfloat16, per gqa layer
    got = cache_bytes(spec, context_len=10)
    assert (got.sequence, got.token) == (2 * mamba_state, 2 * kv * 10)

"""Linear attention against its definition: causal kernel attention with φ = elu + 1."""

from __future__ import annotations

import torch

import zoo
from zoo.analysis.counts import cache_bytes
from zoo.components.feature_state import EPS, feature_map


def _spec(n_layers: int = 1) -> zoo.ModelSpec:
    return zoo.ModelSpec.model_validate(
        {
            "name": f"linear-{n_layers}",
            "vocab_size": 61,
            "d_model": 32,
            "n_layers": n_layers,
            "max_seq_len": 256,
            "norm": {"kind": "rmsnorm"},
            "positional": {"kind": "none"},
            "block": {"kind": "pre_norm"},
            "attention": {"kind": "linear", "n_heads": 4},
            "ffn": {"kind": "none"},
        }
    )


def test_chunked_form_equals_the_quadratic_definition_across_chunks():
    model = zoo.build(_spec(), seed=0).eval()
    mixer = model.layers[0].attention
    x = torch.randn(2, 150, 32)  # three chunks of 64
    with torch.no_grad():
        got = mixer(x)
        B, T, H, D = 2, 150, 4, 8
        q = feature_map(mixer.q_proj(x).view(B, T, H, D).transpose(1, 2))
        k = feature_map(mixer.k_proj(x).view(B, T, H, D).transpose(1, 2))
        v = mixer.v_proj(x).view(B, T, H, D).transpose(1, 2)
        weights = (q @ k.transpose(-1, -2)).tril()  # (B, H, T, T)
        y = (weights @ v) / (weights.sum(-1, keepdim=True) + EPS)
        expected = mixer.o_proj(y.transpose(1, 2).reshape(B, T, H * D))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_state_is_fixed_per_sequence_and_flops_do_not_grow():
    spec = _spec(n_layers=3)
    per_layer = (4 * 8 * 8 + 4 * 8) * 4  # kv (H, D, D) and k_sum (H, D), float32
    assert cache_bytes(spec, batch_size=2, context_len=100_000).sequence == 2 * 3 * per_layer
    assert cache_bytes(spec, context_len=100_000).token == 0
    assert zoo.flops_per_token(spec, 10) == zoo.flops_per_token(spec, 100_000)

"""prefill + decode_step == the full forward for the recurrent kinds, alone and in hybrids."""

from __future__ import annotations

import itertools

import pytest
import torch

import zoo
from tests.generation_checks import _one_thread, check_compiled_decode, check_left_padded_decode  # noqa: F401 (autouse fixture)
from zoo.analysis.counts import cache_bytes, state_bytes
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill
from zoo.specs.model import ModelSpec

VOCAB = 61
MIXERS = {
    "gated_deltanet": {
        "kind": "gated_deltanet",
        "n_k_heads": 2,
        "n_v_heads": 4,
        "head_k_dim": 8,
        "head_v_dim": 6,
        "chunk_size": 4,
    },
    "mamba2": {"kind": "mamba2", "n_heads": 4, "head_dim": 16, "n_groups": 2, "state_size": 8, "chunk_size": 4},
}
GATED_ATTENTION = {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2, "head_dim": 8, "qk_norm": True, "output_gate": True}
FFN = {
    "none": {"kind": "none"},
    "swiglu": {"kind": "swiglu", "hidden": 24},
    "moe-shared": {"kind": "moe", "n_experts": 4, "top_k": 2, "hidden": 16, "shared_hidden": 8, "shared_gate": True},
}
LAYOUTS = ("alone", "hybrid")  # hybrid: every second layer gated attention with partial RoPE
GRID = list(itertools.product(MIXERS, FFN, LAYOUTS))


def recurrent_model(mixer: str, ffn: str, layout: str) -> zoo.model.build.ZooModel:
    layers = {}
    if layout == "hybrid":
        layers = {"1::2": {"attention": GATED_ATTENTION, "positional": {"kind": "rope", "partial_rotary_factor": 0.5}}}
    spec = ModelSpec.model_validate(
        {
            "name": f"recurrent-{mixer}-{ffn}-{layout}",
            "vocab_size": VOCAB,
            "d_model": 32,
            "n_layers": 2,
            "max_seq_len": 32,
            "norm": {"kind": "rmsnorm", "unit_offset": True},
            "positional": {"kind": "none"},
            "attention": MIXERS[mixer],
            "ffn": FFN[ffn],
            "block": {"kind": "pre_norm"},
            "layers": layers,
        }
    )
    model = zoo.build(spec, seed=0).eval()
    with torch.no_grad():  # non-trivial norms, so a wrong norm path shows
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.normal_(0.0, 0.3)
    return model


@pytest.mark.parametrize("combination", GRID, ids=["-".join(c) for c in GRID])
def test_prefill_then_decode_equals_full_forward(combination):
    model = recurrent_model(*combination)
    ids = torch.randint(0, VOCAB, (2, 11))  # prefill 6 (more than a chunk of 4), then 5 steps
    with torch.no_grad():
        full = model(ids)
    cache = KVCache(model, batch_size=2, max_len=11)
    steps = [prefill(model, ids[:, :6], cache)]
    steps += [decode_step(model, ids[:, t : t + 1], cache) for t in range(6, 11)]
    torch.testing.assert_close(torch.stack(steps, dim=1), full[:, 5:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mixer", MIXERS)
def test_chunked_prefill_equals_full_forward(mixer):
    model = recurrent_model(mixer, "moe-shared", "hybrid")
    ids = torch.randint(0, VOCAB, (2, 12))
    with torch.no_grad():
        full = model(ids)
    cache = KVCache(model, batch_size=2, max_len=12)
    last = [prefill(model, ids[:, a:b], cache) for a, b in ((0, 2), (2, 4), (4, 9))]
    last += [decode_step(model, ids[:, t : t + 1], cache) for t in range(9, 12)]
    torch.testing.assert_close(torch.stack(last, dim=1), full[:, [1, 3, 8, 9, 10, 11]], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("combination", [(m, "swiglu", layout) for m in MIXERS for layout in LAYOUTS])
def test_left_padded_rows_equal_their_unpadded_runs(combination):
    check_left_padded_decode(recurrent_model(*combination), VOCAB, n_follow=6)


@pytest.mark.parametrize("mixer", MIXERS)
def test_compiled_decode_step_equals_eager_without_recompiling(mixer):
    check_compiled_decode(
        recurrent_model(mixer, "moe-shared", "hybrid"), [[5, 9, 2, 7, 7, 1], [11, 4], [8, 8, 20, 3]], 5
    )


@pytest.mark.parametrize("mixer", MIXERS)
def test_a_prefill_after_reset_reads_no_stale_state(mixer):
    model = recurrent_model(mixer, "none", "alone")
    first, second = torch.randint(0, VOCAB, (2, 9)), torch.randint(0, VOCAB, (2, 5))
    cache = KVCache(model, batch_size=2, max_len=9)
    prefill(model, first, cache)
    cache.reset()
    with torch.no_grad():
        expected = model(second)[:, -1]
    torch.testing.assert_close(prefill(model, second, cache), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mixer", MIXERS)
def test_state_is_counted_per_sequence_not_per_token(mixer):
    spec = recurrent_model(mixer, "none", "hybrid").spec
    short, long = (cache_bytes(spec, batch_size=1, context_len=n, dtype="float32") for n in (8, 16))
    assert short.sequence == long.sequence == state_bytes(spec, dtype="float32") > 0
    assert long.token == 2 * short.token > 0  # only the attention layer's K/V grow

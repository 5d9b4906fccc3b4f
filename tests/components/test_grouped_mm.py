import pytest
import torch

from zoo.components.grouped_mm import expert_offsets, grouped_mm_supported
from zoo.components.moe import MoE, MoEOptions

VARIANTS = [
    {},
    {"bias": True, "router_bias": True, "routing": "topk_softmax", "activation": "swiglu_oai", "clamp_limit": 0.5},
    {"shared_hidden": 8, "renormalize": False},
    {"gated": False, "activation": "gelu"},
]


def _moe(**kw):
    moe = MoE(MoEOptions(n_experts=4, top_k=2, hidden=8, **kw), d_model=8)
    with torch.no_grad():
        for p in moe.parameters():
            p.normal_(std=0.5)
    return moe


@pytest.mark.parametrize("kw", VARIANTS)
def test_grouped_path_equals_the_looped_one(kw):
    moe = _moe(**kw)
    x = torch.randn(9, 8)
    weights, index = moe.route(x)
    torch.testing.assert_close(moe._experts_grouped(x, weights, index), moe._experts_looped(x, weights, index))


def test_prefill_takes_the_grouped_path_on_the_cpu(monkeypatch):
    moe = _moe()
    monkeypatch.setattr(MoE, "_experts_looped", lambda *a: pytest.fail("looped path in eager CPU prefill"))
    assert moe(torch.randn(2, 5, 8)).shape == (2, 5, 8)


def test_experts_no_token_chose_are_empty_groups():
    index = torch.tensor([[3, 1], [3, 1], [1, 3]])
    assert expert_offsets(index.reshape(-1), 5).tolist() == [0, 3, 3, 6, 6]


def test_supported_needs_16_byte_rows_and_a_known_dtype():
    assert grouped_mm_supported(torch.randn(2, 8), 8)
    assert not grouped_mm_supported(torch.randn(2, 6), 8)  # 24-byte rows
    assert grouped_mm_supported(torch.randn(2, 8, dtype=torch.bfloat16), 16)
    assert not grouped_mm_supported(torch.randn(2, 8, dtype=torch.float64), 8)


def test_compiled_bf16_grouped_step_matches_eager():
    moe = _moe().to(torch.bfloat16)
    x = torch.randn(6, 8, dtype=torch.bfloat16)
    weights, index = moe.route(x)
    compiled = torch.compile(moe._experts_grouped, fullgraph=True)
    torch.testing.assert_close(
        compiled(x, weights, index), moe._experts_grouped(x, weights, index), atol=2e-2, rtol=2e-2
    )

import torch

from zoo.components.moe import MoE, MoEOptions


def _moe(**kw):
    options = MoEOptions(n_experts=4, top_k=2, hidden=8, **kw)
    moe = MoE(options, d_model=6)
    with torch.no_grad():
        for p in moe.parameters():
            p.normal_(std=0.5)
    return moe


def test_gathered_and_looped_expert_paths_agree():
    for kw in [
        {},
        {"bias": True, "router_bias": True, "routing": "topk_softmax", "activation": "swiglu_oai", "clamp_limit": 0.5},
        {"shared_hidden": 5, "renormalize": False},
        {"gated": False, "activation": "gelu"},
    ]:
        moe = _moe(**kw)
        x = torch.randn(5, 6)
        weights, index = moe.route(x)
        torch.testing.assert_close(moe._experts_gathered(x, weights, index), moe._experts_looped(x, weights, index))


def test_routing_conventions():
    moe = _moe()
    weights, _ = moe.route(torch.randn(3, 6))
    torch.testing.assert_close(weights.sum(-1), torch.ones(3))  # renormalised
    moe = _moe(routing="topk_softmax")
    weights, _ = moe.route(torch.randn(3, 6))
    torch.testing.assert_close(weights.sum(-1), torch.ones(3))


def test_active_parameters_count_top_k_of_the_experts():
    moe = _moe(shared_hidden=5)
    total = sum(p.numel() for p in moe.parameters())
    routed = moe.routed_param_count()
    assert moe.active_param_count() == total - routed // 2

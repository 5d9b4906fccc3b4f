import pytest
import torch
from zoo_mla.moe import DeepSeekMoE, DeepSeekMoEOptions

from zoo.errors import SpecError
from zoo.specs.options import Options

transformers = pytest.importorskip("transformers")


def _moe(**options: object) -> DeepSeekMoE:
    opts = DeepSeekMoEOptions(n_experts=8, top_k=3, hidden=4, **options)
    moe = DeepSeekMoE(opts, d_model=16)
    torch.nn.init.normal_(moe.router.weight, std=0.5)
    return moe


def test_v2_greedy_softmax_routing_matches_transformers():
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2TopkRouter

    moe = _moe(routed_scaling_factor=1.5)
    config = transformers.DeepseekV2Config(
        hidden_size=16,
        num_attention_heads=4,
        n_routed_experts=8,
        num_experts_per_tok=3,
        routed_scaling_factor=1.5,
        topk_method="greedy",
    )
    router = DeepseekV2TopkRouter(config)
    router.weight.data.copy_(moe.router.weight)
    x = torch.randn(10, 16)
    _, hf_weights, hf_index = router(x)
    weights, index = moe.route(x)
    order, hf_order = index.sort(dim=-1), hf_index.sort(dim=-1)
    torch.testing.assert_close(order.values, hf_order.values)
    torch.testing.assert_close(weights.gather(1, order.indices), hf_weights.gather(1, hf_order.indices))


def test_v3_sigmoid_grouped_routing_with_correction_bias_matches_transformers():
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

    moe = _moe(
        scoring="sigmoid",
        topk_method="noaux_tc",
        n_group=4,
        topk_group=2,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
    )
    moe.e_score_correction_bias.normal_(0.0, 0.3)
    config = transformers.DeepseekV3Config(
        hidden_size=16,
        num_attention_heads=4,
        n_routed_experts=8,
        num_experts_per_tok=3,
        n_group=4,
        topk_group=2,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
    )
    router = DeepseekV3TopkRouter(config)
    router.weight.data.copy_(moe.router.weight)
    router.e_score_correction_bias.copy_(moe.e_score_correction_bias)
    x = torch.randn(32, 16)
    _, hf_weights, hf_index = router(x)
    weights, index = moe.route(x)
    order, hf_order = index.sort(dim=-1), hf_index.sort(dim=-1)
    torch.testing.assert_close(order.values, hf_order.values)
    torch.testing.assert_close(weights.gather(1, order.indices), hf_weights.gather(1, hf_order.indices))
    # the bias steers the choice but not the weights: unbiased sigmoid scores, renormalised
    scores = torch.sigmoid(x @ moe.router.weight.T).gather(1, index)
    torch.testing.assert_close(weights, 2.5 * scores / scores.sum(-1, keepdim=True))


def test_active_parameters_count_shared_and_top_k_experts():
    moe = DeepSeekMoE(DeepSeekMoEOptions(n_experts=8, top_k=2, hidden=4, n_shared_experts=2), d_model=16)
    expert = 3 * 16 * 4
    assert moe.active_param_count() == 8 * 16 + 2 * expert + 3 * 16 * 8


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topk_method": "noaux_tc"}, "needs n_group and topk_group"),
        ({"topk_method": "group_limited_greedy", "n_group": 3, "topk_group": 1}, "not divisible by n_group=3"),
        ({"topk_method": "group_limited_greedy", "n_group": 2, "topk_group": 3}, "topk_group: 3 exceeds n_group=2"),
    ],
)
def test_bad_routing_options_name_the_field(options, message):
    import zoo

    with pytest.raises(SpecError, match=message):
        zoo.spec("deepseek-v2-lite").override({f"ffn.{k}": v for k, v in options.items()})


def test_options_are_zoo_options():
    assert issubclass(DeepSeekMoEOptions, Options)

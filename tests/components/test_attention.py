import torch

import zoo
from tests.conftest import TINY_VOCAB, tiny_spec
from zoo.specs.visibility import visible_keys as visible


def test_window_mask_sees_exactly_window_keys():
    t = torch.arange(6)
    mask = visible(t, t, window=3)[0, 0]
    assert mask.sum(-1).tolist() == [1, 2, 3, 3, 3, 3]
    assert not mask[5, 2] and mask[5, 3]


def test_sliding_window_limits_what_a_token_sees():
    spec = tiny_spec("mistral-7b", window=3).override({"n_layers": 1})
    model = zoo.build(spec, seed=0)
    ids = torch.randint(0, TINY_VOCAB, (1, 10))
    changed = ids.clone()
    changed[0, 0] = (changed[0, 0] + 1) % TINY_VOCAB  # outside the window of the last token
    torch.testing.assert_close(model(ids)[:, -1], model(changed)[:, -1])


def test_sinks_absorb_probability_mass():
    spec = tiny_spec("gpt-oss-20b").override({"n_layers": 1})
    model = zoo.build(spec, seed=0)
    ids = torch.randint(0, TINY_VOCAB, (1, 6))
    before = model(ids)
    with torch.no_grad():
        model.layers[0].attention.sinks.fill_(5.0)
    assert not torch.allclose(before, model(ids))


def test_one_half_precision_query_on_the_cpu_attends_in_float32():
    import torch.nn.functional as F

    from zoo.components.sdpa_kernels import sdpa

    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 1, 16, generator=generator).bfloat16()  # (B, H, 1, D)
    k, v = torch.randn(2, 1, 2, 9, 16, generator=generator).bfloat16()  # (B, Hkv, S, D) each
    bias = torch.randn(1, 1, 1, 9, generator=generator).bfloat16().masked_fill(torch.arange(9) >= 6, float("-inf"))
    for mask in ((torch.arange(9) < 6).view(1, 1, 1, 9), bias):  # boolean and float masks
        got = sdpa(q, k, v, attn_mask=mask, enable_gqa=True)
        floats = F.scaled_dot_product_attention(
            q.float(),
            k.float(),
            v.float(),
            attn_mask=mask.float() if mask.is_floating_point() else mask,
            enable_gqa=True,
        )
        assert got.dtype == torch.bfloat16 and torch.equal(got, floats.bfloat16())
        half = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # torch's bfloat16 kernel
        torch.testing.assert_close(got, half, atol=2e-2, rtol=2e-2)  # the same within bfloat16's precision

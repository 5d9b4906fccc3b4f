"""Blocks without an FFN, bidirectional attention, and the registry's capability checks."""

from __future__ import annotations

import torch

import zoo

TINY = {
    "n_layers": 1,
    "d_model": 32,
    "vocab_size": 64,
    "attention.n_heads": 2,
    "attention.n_kv_heads": 2,
    "ffn.hidden": 64,
}


def test_ffn_none_builds_a_block_without_the_ffn_branch_or_its_norm():
    for block in ("pre_norm", "post_norm", "parallel", "sandwich"):
        spec = zoo.spec("gpt2").override(TINY).override({"ffn": {"kind": "none"}, "block": {"kind": block}})
        model = zoo.build(spec, seed=0)
        names = [name for name, _ in model.named_parameters()]
        assert not any(".ffn" in name for name in names), (block, names)
        assert model(torch.randint(64, (1, 4))).shape == (1, 4, 64)
    with_ffn = zoo.count_params(zoo.spec("gpt2").override(TINY)).total
    without = zoo.count_params(zoo.spec("gpt2").override(TINY).override({"ffn.kind": "none"})).total
    assert with_ffn - without == 2 * 32 * 64 + 64 + 32 + 2 * 32  # up, down (+ biases) and the ffn norm


def test_attention_causal_false_sees_later_tokens():
    ids = torch.randint(64, (1, 6))
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % 64
    causal = zoo.build(zoo.spec("gpt2").override(TINY), seed=0)
    assert torch.equal(causal(ids)[0, 0], causal(changed)[0, 0])
    encoder = zoo.build(zoo.spec("gpt2").override({**TINY, "attention.causal": False}), seed=0)
    assert not torch.allclose(encoder(ids)[0, 0], encoder(changed)[0, 0])

import pytest
import torch

import zoo
from tests.conftest import FAMILY_PRESETS, TINY_VOCAB, tiny_spec


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_tiny_model_of_every_family_returns_logits(name):
    model = zoo.build(tiny_spec(name), seed=0)
    ids = torch.randint(0, TINY_VOCAB, (2, 9))
    logits = model(ids)
    assert logits.shape == (2, 9, TINY_VOCAB)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("block", ["pre_norm", "post_norm", "parallel", "sandwich"])
@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rope", "alibi", "none"])
def test_every_block_with_every_positional_kind(block, positional):
    spec = tiny_spec("llama-3.2-1b").override({"block.kind": block, "positional.kind": positional})
    logits = zoo.build(spec, seed=0)(torch.randint(0, TINY_VOCAB, (1, 5)))
    assert logits.shape == (1, 5, TINY_VOCAB)


def test_causality_future_tokens_do_not_change_the_past():
    model = zoo.build(tiny_spec("gpt-oss-20b"), seed=0)
    ids = torch.randint(0, TINY_VOCAB, (1, 12))
    changed = ids.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % TINY_VOCAB
    torch.testing.assert_close(model(ids)[:, :8], model(changed)[:, :8])


def test_meta_build_allocates_nothing_and_ties_weights():
    model = zoo.build("qwen3-0.6b", device="meta", dtype="bfloat16")
    assert all(p.is_meta and p.dtype == torch.bfloat16 for p in model.parameters())
    assert model.lm_head.weight is model.embed.weight


def test_materialised_model_keeps_ties_and_float32_rope():
    model = zoo.build(tiny_spec("qwen3-0.6b"), dtype="bfloat16", seed=0)
    assert model.lm_head.weight is model.embed.weight
    assert model.positionals[0].inv_freq.dtype == torch.float32
    assert not any(p.is_meta for p in model.parameters())


def test_seed_makes_weights_reproducible():
    a = zoo.build(tiny_spec("gpt2"), seed=3)
    b = zoo.build(tiny_spec("gpt2"), seed=3)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_gemma_layers_share_one_positional_module_per_distinct_spec():
    model = zoo.build(tiny_spec("gemma-3-270m"), device="meta")
    assert len(model.positionals) == 2
    assert model.layer_positional == [0, 0, 0, 0, 0, 1]

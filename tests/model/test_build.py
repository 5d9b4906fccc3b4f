import pytest
import torch

import zoo
from tests.conftest import TINY_VOCAB, tiny_spec
from zoo.model.cache import KVCache

# tiny llama-3.2-1b (tests.conftest.tiny_spec), counted by hand: d 64, 2 layers, vocabulary 97,
# 4 query heads and 2 key/value heads of 16, SwiGLU hidden 48, RMSNorm (a weight), no biases,
# the head tied to the token table; the learned table is max_seq_len 64 x d 64
EMBEDDING = 97 * 64
ATTENTION = 64 * 64 + 2 * (64 * 2 * 16) + 64 * 64  # q, k, v, o
SWIGLU = 3 * 64 * 48  # gate, up, down
NORMS_PER_BLOCK = {"pre_norm": 2, "post_norm": 2, "parallel": 1, "sandwich": 4}  # parallel: GPT-J's one shared norm
POSITIONAL_PARAMS = {"learned": 64 * 64, "sinusoidal": 0, "rope": 0, "alibi": 0, "none": 0}


@pytest.mark.parametrize("block", ["pre_norm", "post_norm", "parallel", "sandwich"])
@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rope", "alibi", "none"])
def test_every_block_with_every_positional_kind(block, positional):
    """Each combination has the parameters counted by hand, and decoding with the cache gives
    the full forward's logits (positions, masks and biases agree between the two paths)."""
    spec = tiny_spec("llama-3.2-1b").override({"block.kind": block, "positional.kind": positional})
    model = zoo.build(spec, seed=0).eval()
    per_block = ATTENTION + SWIGLU + NORMS_PER_BLOCK[block] * 64
    assert sum(p.numel() for p in model.parameters()) == EMBEDDING + 2 * per_block + 64 + POSITIONAL_PARAMS[positional]
    ids = torch.randint(0, TINY_VOCAB, (2, 9))
    with torch.no_grad():
        full = model(ids)
        cache = KVCache(model, batch_size=2, max_len=9)
        steps = [model(ids[:, :4], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


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

import pytest
import torch
from conftest import TINY_VOCAB, tiny_deepseek

import zoo
from zoo.model.cache import KVCache


@pytest.mark.parametrize("name", ["deepseek-v2-lite", "deepseek-v3"])
def test_prefill_chunk_and_decode_equal_the_full_forward(name):
    """Prefill (expanded), a cached chunk (expanded over the cache), then decode (absorbed)."""
    model = zoo.build(tiny_deepseek(name), seed=0).eval()
    ids = torch.randint(0, TINY_VOCAB, (2, 12))
    with torch.no_grad():
        full = model(ids)
        cache = KVCache(model, batch_size=2, max_len=16)
        steps = [model(ids[:, :5], cache=cache), model(ids[:, 5:8], cache=cache)]
        steps += [model(ids[:, t : t + 1], cache=cache) for t in range(8, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_cache_holds_the_latent_and_one_rope_key():
    spec = tiny_deepseek()
    model = zoo.build(spec, seed=0)
    cache = KVCache(model, batch_size=3, max_len=10)
    assert {name: tuple(t.shape) for name, t in cache.layers[0].items()} == {
        "latent": (3, 10, 16),
        "k_rope": (3, 10, 4),
    }
    assert cache.nbytes == zoo.kv_cache_bytes(spec, batch_size=3, seq_len=10, dtype="float32")


def test_yarn_mscale_enters_the_softmax_scale():
    spec = tiny_deepseek()
    attention = zoo.build(spec, device="meta").layers[0].attention
    mscale = 0.1 * 0.707 * torch.log(torch.tensor(40.0)).item() + 1.0
    assert attention.scale == pytest.approx((8 + 4) ** -0.5 * mscale**2)
    plain = zoo.build(spec.override({"positional.scaling": None}), device="meta").layers[0].attention
    assert plain.scale == pytest.approx(12**-0.5)


def test_rope_rotates_only_the_rope_channels():
    model = zoo.build(tiny_deepseek(), device="meta")
    assert model.positionals[0].rot_dim == 4


def test_left_padding_is_masked_in_prefill_and_decode():
    """A left-padded row gives the logits its tokens give alone (cache.key_valid marks pads)."""
    model = zoo.build(tiny_deepseek(), seed=0).eval()
    tokens = torch.randint(0, TINY_VOCAB, (1, 7))
    pad = 3
    ids = torch.cat((torch.zeros(1, pad, dtype=torch.long), tokens[:, :5]), dim=1)  # (1, 8)
    positions = (torch.arange(8) - pad).clamp(min=0)[None]  # (1, 8)
    with torch.no_grad():
        alone = model(tokens)  # (1, 7, V)
        cache = KVCache(model, batch_size=1, max_len=12)
        cache.key_valid = torch.zeros(1, 12, dtype=torch.bool)
        cache.key_valid[:, pad:] = True
        prefill = model(ids, positions=positions, cache=cache)[:, pad:]
        decoded = [model(tokens[:, t : t + 1], positions=torch.tensor([[t]]), cache=cache) for t in (5, 6)]
    torch.testing.assert_close(torch.cat([prefill, *decoded], dim=1), alone, atol=1e-5, rtol=1e-5)

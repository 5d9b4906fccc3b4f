import pytest
import torch

import zoo
from tests.conftest import FAMILY_PRESETS, TINY_VOCAB, tiny_spec
from zoo.cache import KVCache
from zoo.errors import GenerationError


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_prefill_then_decode_equals_full_forward(name):
    model = zoo.build(tiny_spec(name), seed=0).eval()
    ids = torch.randint(0, TINY_VOCAB, (2, 14))  # past the window of 4
    with torch.no_grad():
        full = model(ids)
        cache = KVCache(model, batch_size=2, max_len=16)
        steps = [model(ids[:, :5], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in range(5, 14)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_allocated_bytes_equal_the_analysis():
    spec = tiny_spec("gpt-oss-20b")
    model = zoo.build(spec, seed=0)
    cache = KVCache(model, batch_size=3, max_len=40)
    assert cache.nbytes == zoo.kv_cache_bytes(spec, batch_size=3, seq_len=40, dtype="float32")


def test_cache_overflow_is_a_clear_error():
    model = zoo.build(tiny_spec("gpt2"), seed=0)
    cache = KVCache(model, batch_size=1, max_len=4)
    with pytest.raises(GenerationError, match="max_len=4"):
        model(torch.zeros(1, 5, dtype=torch.long), cache=cache)

import pytest
import torch

import zoo
from tests.conftest import FAMILY_PRESETS, TINY_VOCAB, tiny_spec
from zoo.errors import GenerationError
from zoo.model.cache import KVCache


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


@pytest.mark.parametrize(
    "combination",
    [
        ("mha", None, False, False, "rope", "swiglu"),
        ("mqa", 4, True, True, "alibi", "moe"),
        ("gqa", 4, False, False, "learned", "swiglu"),
    ],
)
@pytest.mark.parametrize(("batch", "length"), [(1, 3), (2, 17)])
def test_allocated_bytes_equal_the_analysis_for_every_layout(combination, batch, length):
    from tests.model.test_generation import grid_spec

    spec = grid_spec(*combination)
    model = zoo.build(spec, seed=0)
    for dtype in (torch.float32, torch.bfloat16):
        cache = KVCache(model, batch_size=batch, max_len=length, dtype=dtype)
        assert cache.nbytes == zoo.kv_cache_bytes(spec, batch_size=batch, seq_len=length, dtype=dtype)


def test_write_position_lives_on_the_device_and_resets():
    model = zoo.build(tiny_spec("llama-3.2-1b"), seed=0)
    cache = KVCache(model, batch_size=2, max_len=8)
    model(torch.zeros(2, 3, dtype=torch.long), cache=cache)
    assert cache.length == 3 and cache.position.tolist() == [3]
    cache.set_padding(torch.tensor([[0, 1, 1], [1, 1, 1]]))
    assert cache.pad_count.tolist() == [1, 0]
    assert cache.positions(torch.tensor([3])).tolist() == [[2], [3]]
    cache.reset()
    assert cache.length == 0 and cache.position.tolist() == [0] and cache.key_valid is None


def test_an_empty_cache_is_a_clear_error():
    model = zoo.build(tiny_spec("gpt2"), seed=0)
    with pytest.raises(GenerationError, match="max_len=0"):
        KVCache(model, batch_size=1, max_len=0)


def test_eager_layers_see_the_filled_length_only_for_claimed_slots():
    """Eager attention reads only the slots written so far (cache.filled); slots given by
    the caller (cache_time) or a compiled step keep the whole static cache."""
    model = zoo.build(tiny_spec("qwen3-0.6b"), seed=0)
    cache = KVCache(model, batch_size=1, max_len=32)
    time = cache.advance(5)
    assert cache.layer(0, time).filled == 5
    assert cache.layer(0, time, claimed=False).filled is None

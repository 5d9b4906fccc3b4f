"""The one-call token steps (``zoo_rwkv.cpu_step.time_mix_token`` and ``channel_mix_token``:
the token shift's mixes, the projections and the WKV step or the gated relu² in one C++ call, the
projections made by zoo's one-row products through ``zoo.parts.CPP_PROJECTIONS``) give the
modules' own calls bit for bit, logits and every state tensor, and decline (None, nothing
written) what they do not compute."""

from __future__ import annotations

import copy

import pytest
import torch
from rwkv_helpers import TINY, checkpoint, deterministic  # noqa: F401 (fixtures)
from zoo_rwkv import cpu_step
from zoo_rwkv.channel_mix import ChannelMix
from zoo_rwkv.time_mix import TimeMix

import zoo
from zoo.components import row_product as rows  # the kernel's switch, as zoo's own tests set it
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill

pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _row_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rows, "FORCED", True)
    monkeypatch.setattr(rows, "MIN_WEIGHT_BYTES", 0)


def _decoded(model: torch.nn.Module, cache: KVCache, ids: torch.Tensor) -> torch.Tensor:
    return torch.stack([decode_step(model, ids[:, t : t + 1], cache) for t in range(ids.shape[1])], 1)  # (1, T, V)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_one_call_steps_give_the_modules_own_calls_bit_for_bit(checkpoint, monkeypatch, dtype):
    taken: list[bool] = []

    def counted(call):  # type: ignore[no-untyped-def]
        def step(*args):  # type: ignore[no-untyped-def]
            out = call(*args)
            taken.append(out is not None)
            return out

        return step

    for name in ("time_mix_token", "channel_mix_token"):
        monkeypatch.setattr(cpu_step, name, counted(getattr(cpu_step, name)))
    model = zoo.from_pretrained(checkpoint[1], progress=False, dtype=dtype).eval()
    ids = torch.randint(0, TINY["vocab_size"], (1, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        cache = KVCache(model, batch_size=1, max_len=9)
        prefill(model, ids[:, :5], cache)
        twin = copy.copy(cache)
        twin.layers = [{name: t.clone() for name, t in layer.items()} for layer in cache.layers]
        twin.position, twin.pad_count = cache.position.clone(), cache.pad_count.clone()
        fused = _decoded(model, cache, ids[:, 5:])
        with monkeypatch.context() as off:
            off.setattr(TimeMix, "_token_step", lambda *args: None)
            off.setattr(ChannelMix, "_token_step", lambda *args: None)
            own = _decoded(model, twin, ids[:, 5:])
    assert taken == [True] * 2 * TINY["num_hidden_layers"] * 4  # both mixes, every layer and step
    assert torch.equal(fused, own)
    for ours, theirs in zip(cache.layers, twin.layers, strict=True):
        assert all(torch.equal(ours[name], theirs[name]) for name in ours)


def test_the_calls_decline_what_they_do_not_compute_and_write_nothing(checkpoint):
    """A projection of another width, a WKV sum in another dtype, two rows: None, the shift and
    WKV states as they were."""
    model = zoo.from_pretrained(checkpoint[1], progress=False).eval()
    time_mix = next(m for m in model.modules() if isinstance(m, TimeMix))
    channel_mix = next(m for m in model.modules() if isinstance(m, ChannelMix))
    d, c = time_mix.d_model, time_mix.channels
    g = torch.Generator().manual_seed(4)
    x = torch.randn(1, 1, d, generator=g)
    state = [torch.randn(1, d, generator=g), *(torch.rand(1, c, generator=g) for _ in range(3))]
    before = [t.clone() for t in state]
    layers = (time_mix.key, time_mix.value, time_mix.receptance, time_mix.output)
    projections = [(layer.weight, None, None) for layer in layers]
    ratios = (time_mix.time_mix_key, time_mix.time_mix_value, time_mix.time_mix_receptance)
    decay, u = time_mix.time_decay, time_mix.time_first
    narrow = [*projections[:3], (time_mix.output.weight[:, :-1], None, None)]
    half_sums = [state[0], state[1].bfloat16(), *state[2:]]
    with torch.no_grad():
        assert cpu_step.time_mix_token(x, state, ratios, narrow, decay, u) is None
        assert cpu_step.time_mix_token(x, half_sums, ratios, projections, decay, u) is None
        assert cpu_step.time_mix_token(x.expand(1, 2, d), state, ratios, projections, decay, u) is None
        channel = [(layer.weight, None, None) for layer in (channel_mix.key, channel_mix.receptance)]
        short_value = (channel_mix.value.weight[:, :-1], None, None)
        channel_ratios = (channel_mix.time_mix_key, channel_mix.time_mix_receptance)
        assert cpu_step.channel_mix_token(x, state[0], channel_ratios, [*channel, short_value]) is None
        assert all(torch.equal(t, b) for t, b in zip(state, before, strict=True))
        assert cpu_step.time_mix_token(x, state, ratios, projections, decay, u) is not None  # fitting: computed
        assert not torch.equal(state[0], before[0])

"""The recurrent-state interface: a stateful mixer from a test plugin, with no core change.

``RunningSum`` keeps a per-sequence state (the running sum of its inputs): a prefill after
``KVCache.reset`` must not read the previous prompt's state, left padding must not enter
it (``token_valid``), and analysis reports it as ``state_bytes``, not per token.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import zoo
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill
from zoo.specs.interfaces import BuildContext, Positions, TokenMixer
from zoo.specs.options import Options
from zoo.specs.registry import reset_registry
from zoo.specs.state import LayerState, Memory, StateTensor


class RunningSum(TokenMixer):
    """y_t = W (s + sum_{u <= t} x_u); the state s (B, d) is carried between calls."""

    def __init__(self, options: Options, ctx: BuildContext) -> None:
        super().__init__()
        self.d = ctx.d_model
        self.proj = nn.Linear(ctx.d_model, ctx.d_model, bias=False)

    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        return {"sum": StateTensor((batch_size, self.d), dtype=torch.float32, per="sequence")}

    def score_flops(self, n_new: int, context_len: int) -> int:
        return n_new * self.d  # one add per channel per token, whatever the context

    def forward(
        self, x: torch.Tensor, positions: Positions, state: LayerState | None = None, memory: Memory | None = None
    ) -> torch.Tensor:
        if state is not None and state.token_valid is not None:
            x = x * state.token_valid[..., None].to(x.dtype)  # (B, T, d): pads add nothing
        sums = x.float().cumsum(dim=1)  # (B, T, d)
        if state is not None:
            sums = sums + state.tensors["sum"][:, None]
            state.tensors["sum"].copy_(sums[:, -1])
        return self.proj(sums.to(x.dtype))


class Plugin:
    @zoo.hookimpl
    def zoo_register_components(self, register):  # type: ignore[no-untyped-def]
        register(
            "attention", "runsum", lambda options, ctx: RunningSum(options, ctx), options=Options, module=RunningSum
        )


@pytest.fixture
def hybrid():
    zoo.register_plugin(Plugin(), name="runsum-plugin")
    spec = zoo.spec("qwen3-0.6b").override(
        {
            "n_layers": 2,
            "d_model": 32,
            "vocab_size": 64,
            "attention.n_heads": 2,
            "attention.n_kv_heads": 1,
            "attention.head_dim": 16,
            "ffn.hidden": 64,
            "layers": {"0": {"attention": {"kind": "runsum"}}},
        }
    )
    yield zoo.build(spec, seed=0)
    reset_registry()


def test_reset_clears_recurrent_state(hybrid):
    ids_a, ids_b = torch.randint(64, (2, 5)), torch.randint(64, (2, 7))
    cache = KVCache(hybrid, 2, 16)
    prefill(hybrid, ids_a, cache)
    cache.reset()
    after_reset = prefill(hybrid, ids_b, cache)
    fresh = prefill(hybrid, ids_b, KVCache(hybrid, 2, 16))
    torch.testing.assert_close(after_reset, fresh)


def test_prefill_then_decode_equals_the_full_forward(hybrid):
    ids = torch.randint(64, (2, 9))
    full = hybrid(ids)  # (B, T, V)
    cache = KVCache(hybrid, 2, 16)
    steps = [prefill(hybrid, ids[:, :5], cache)]
    steps += [decode_step(hybrid, ids[:, t : t + 1], cache) for t in range(5, 9)]
    torch.testing.assert_close(torch.stack(steps, dim=1), full[:, 4:], atol=1e-5, rtol=1e-4)


def test_left_padding_does_not_enter_the_state(hybrid):
    ids = torch.randint(1, 64, (1, 6))
    alone = prefill(hybrid, ids, KVCache(hybrid, 1, 16))
    padded = torch.cat((torch.zeros(1, 3, dtype=torch.long), ids), dim=1)
    mask = torch.cat((torch.zeros(1, 3), torch.ones(1, 6)), dim=1).long()
    batch = prefill(hybrid, padded, KVCache(hybrid, 1, 16), attention_mask=mask)
    torch.testing.assert_close(batch, alone, atol=1e-5, rtol=1e-4)


def test_state_is_reported_per_sequence_not_per_token(hybrid):
    per_token = 2 * 1 * 16 * 4  # layer 1's K and V, float32
    assert zoo.kv_bytes_per_token(hybrid, dtype="float32") == per_token
    assert zoo.state_bytes(hybrid, batch_size=3, dtype="float32") == 3 * 32 * 4
    got = zoo.cache_bytes(hybrid, batch_size=2, context_len=100, dtype="float32")
    assert (got.token, got.sequence, got.memory) == (2 * 100 * per_token, 2 * 32 * 4, 0)
    assert got.total == zoo.kv_cache_bytes(hybrid, 2, 100, dtype="float32") == KVCache(hybrid, 2, 100).nbytes
    assert zoo.flops_per_token(hybrid, 10) - zoo.flops_per_token(hybrid, 5) == 4 * 2 * 16 * 5  # only attention grows


def test_a_factory_building_another_class_than_declared_is_a_plugin_error():
    class Liar:
        @zoo.hookimpl
        def zoo_register_components(self, register):  # type: ignore[no-untyped-def]
            register(
                "ffn",
                "liar",
                lambda options, ctx: nn.Identity(),
                options=Options,
                module=zoo.specs.interfaces.FeedForward,
            )

    zoo.register_plugin(Liar(), name="liar")
    try:
        with pytest.raises(zoo.errors.PluginError, match="ffn kind 'liar' built a Identity, not the FeedForward"):
            zoo.build(zoo.spec("gpt2").override({"n_layers": 1, "ffn": {"kind": "liar"}}), device="meta")
    finally:
        reset_registry()

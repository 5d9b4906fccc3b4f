"""T5's bucketed relative position bias against transformers' T5Attention on the same table."""

import pytest
import torch

import zoo
from zoo.components.relative_position import RelativeBuckets, relative_position_bucket
from zoo.errors import SpecError
from zoo.model.build import ZooModel
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill

transformers = pytest.importorskip("transformers")
from transformers.models.t5.modeling_t5 import T5Attention


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (8, 20)])
def test_buckets_match_t5(bidirectional: bool, num_buckets: int, max_distance: int) -> None:
    relative = torch.arange(-300, 301)[None, :]  # exact, logarithmic and clipped distances
    ours = relative_position_bucket(relative, bidirectional, num_buckets, max_distance)
    theirs = T5Attention._relative_position_bucket(
        relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert torch.equal(ours, theirs)
    assert int(ours.max()) == num_buckets - 1


@pytest.mark.parametrize("is_decoder", [False, True])
def test_bias_matches_t5_compute_bias(is_decoder: bool) -> None:
    config = transformers.T5Config(
        d_model=32,
        d_kv=8,
        num_heads=4,
        relative_attention_num_buckets=16,
        relative_attention_max_distance=40,
        is_decoder=is_decoder,
    )
    theirs = T5Attention(config, has_relative_attention_bias=True).eval()
    ours = RelativeBuckets(4, 16, 40, bidirectional=not is_decoder)
    with torch.no_grad():
        ours.weight.copy_(theirs.relative_attention_bias.weight)
    T, past = 5, 60  # queries at positions 60..64 over keys 0..64, as a cached decoder sees them
    query = torch.arange(past, past + T)[None]
    key = torch.arange(past + T)[None]
    expected = theirs.compute_bias(T, past + T, past_seen_tokens=past)  # (1, H, T, S)
    torch.testing.assert_close(ours.score_bias(query, key, 4), expected, rtol=0, atol=0)


def test_bias_is_shift_invariant_per_row() -> None:
    """Left padding shifts a row's times; the bias depends on differences only."""
    table = RelativeBuckets(2, 8, 16, bidirectional=True)
    pos = torch.arange(6)[None]
    torch.testing.assert_close(table.score_bias(pos, pos, 2), table.score_bias(pos + 3, pos + 3, 2))


def test_head_count_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="2 heads"):
        RelativeBuckets(2, 8, 16, bidirectional=True).score_bias(torch.zeros(1, 1), torch.zeros(1, 1), 4)


def test_spec_builds_one_table_shared_by_every_layer() -> None:
    spec = zoo.spec("gpt2").override(
        {
            "d_model": 32,
            "n_layers": 2,
            "vocab_size": 50,
            "attention.n_heads": 4,
            "attention.n_kv_heads": 4,
            "positional.kind": "relative_buckets",
            "positional.num_buckets": 8,
            "positional.max_distance": 16,
            "attention.scale": 1.0,
        }
    )
    model = zoo.build(spec, seed=0)
    tables = [m for m in model.modules() if isinstance(m, RelativeBuckets)]
    assert len(tables) == 1 and tables[0].weight.shape == (8, 4)
    assert not tables[0].bidirectional  # gpt2's attention is causal
    out = model(torch.randint(0, 50, (2, 7)))
    assert out.shape == (2, 7, 50) and torch.isfinite(out).all()


def test_too_few_buckets_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="num_buckets"):
        zoo.spec("gpt2").override({"positional.kind": "relative_buckets", "positional.num_buckets": 2})


def _t5_decoder_stack():  # type: ignore[no-untyped-def]
    """transformers' T5 decoder stack (no encoder: its cross-attention is skipped), perturbed."""
    from transformers.models.t5.modeling_t5 import T5Stack

    config = transformers.T5Config(
        d_model=32,
        d_kv=8,
        num_heads=4,
        d_ff=48,
        num_layers=2,
        vocab_size=60,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=12,
        is_decoder=True,
        use_cache=False,
        dropout_rate=0.0,
    )
    stack = T5Stack(config).eval()
    with torch.no_grad():
        for param in stack.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    return stack


def _zoo_twin(stack) -> ZooModel:  # type: ignore[no-untyped-def]
    """The same causal stack as a zoo spec: RMS norm, bucketed bias, scale 1, relu MLP."""
    spec = zoo.spec("gpt2").override(
        {
            "d_model": 32,
            "n_layers": 2,
            "vocab_size": 60,
            "max_seq_len": 64,
            "norm.kind": "rmsnorm",
            "norm.eps": 1e-6,
            "positional.kind": "relative_buckets",
            "positional.num_buckets": 8,
            "positional.max_distance": 12,
            "attention.n_heads": 4,
            "attention.n_kv_heads": 4,
            "attention.head_dim": 8,
            "attention.bias": False,
            "attention.scale": 1.0,
            "ffn.hidden": 48,
            "ffn.activation": "relu",
            "ffn.bias": False,
            "tie_embeddings": False,
        }
    )
    model = zoo.build(spec, seed=0)
    hf = stack.state_dict()
    ours = {
        "embed.weight": hf["embed_tokens.weight"],
        "final_norm.weight": hf["final_layer_norm.weight"],
        "positionals.0.weight": hf["block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
        "lm_head.weight": torch.eye(60, 32),
    }  # logits = the first 32 of 60 = the hidden states
    for i in range(2):
        b = f"block.{i}.layer"
        ours[f"layers.{i}.attn_norm.weight"] = hf[f"{b}.0.layer_norm.weight"]
        ours[f"layers.{i}.ffn_norm.weight"] = hf[f"{b}.2.layer_norm.weight"]
        for name in "qkvo":
            ours[f"layers.{i}.attention.{name}_proj.weight"] = hf[f"{b}.0.SelfAttention.{name}.weight"]
        ours[f"layers.{i}.ffn.up_proj.weight"] = hf[f"{b}.2.DenseReluDense.wi.weight"]
        ours[f"layers.{i}.ffn.down_proj.weight"] = hf[f"{b}.2.DenseReluDense.wo.weight"]
    model.load_state_dict(ours)
    return model.eval()


def test_causal_t5_stack_matches_transformers_full_and_cached() -> None:
    """30 tokens cross max_distance 12 (log and clipped buckets); decode steps see the same bias."""
    stack = _t5_decoder_stack()
    model = _zoo_twin(stack)
    ids = torch.randint(0, 60, (2, 30))
    with torch.no_grad():
        expected = stack(input_ids=ids).last_hidden_state  # (B, T, 32)
        full = model(ids)[..., :32]
        cache = KVCache(model, batch_size=2, max_len=30)
        steps = [model(ids[:, :20], cache=cache)[..., :32]]
        steps += [model(ids[:, t : t + 1], cache=cache)[..., :32] for t in range(20, 30)]
    torch.testing.assert_close(full, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, rtol=1e-4, atol=1e-4)


def test_bidirectional_t5_encoder_stack_with_padding() -> None:
    """transformers' T5EncoderModel vs zoo's bidirectional stack of the same parts, a padded row."""
    config = transformers.T5Config(
        d_model=32,
        d_kv=8,
        num_heads=4,
        d_ff=48,
        num_layers=2,
        vocab_size=60,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=12,
        dropout_rate=0.0,
    )
    hf = transformers.T5EncoderModel(config).eval()
    with torch.no_grad():
        for param in hf.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    spec = zoo.spec("gpt2").override(
        {
            "d_model": 32,
            "n_layers": 2,
            "vocab_size": 60,
            "max_seq_len": 64,
            "tie_embeddings": False,
            "norm.kind": "rmsnorm",
            "norm.eps": 1e-6,
            "positional.kind": "relative_buckets",
            "positional.num_buckets": 8,
            "positional.max_distance": 12,
            "attention.n_heads": 4,
            "attention.n_kv_heads": 4,
            "attention.head_dim": 8,
            "attention.bias": False,
            "attention.scale": 1.0,
            "attention.causal": False,
            "ffn.hidden": 48,
            "ffn.activation": "relu",
            "ffn.bias": False,
        }
    )
    model = zoo.build(spec, seed=0).eval()
    table = model.positionals[0]
    assert isinstance(table, RelativeBuckets) and table.bidirectional
    state = {k.replace("encoder.", ""): v for k, v in hf.state_dict().items()}
    ours = {
        "embed.weight": state["shared.weight"],
        "final_norm.weight": state["final_layer_norm.weight"],
        "positionals.0.weight": state["block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
        "lm_head.weight": torch.zeros(60, 32),
    }
    for i in range(2):
        b = f"block.{i}.layer"
        ours |= {
            f"layers.{i}.attn_norm.weight": state[f"{b}.0.layer_norm.weight"],
            f"layers.{i}.ffn_norm.weight": state[f"{b}.1.layer_norm.weight"],
            f"layers.{i}.ffn.up_proj.weight": state[f"{b}.1.DenseReluDense.wi.weight"],
            f"layers.{i}.ffn.down_proj.weight": state[f"{b}.1.DenseReluDense.wo.weight"],
        }
        ours |= {f"layers.{i}.attention.{n}_proj.weight": state[f"{b}.0.SelfAttention.{n}.weight"] for n in "qkvo"}
    model.load_state_dict(ours)
    ids = torch.randint(0, 60, (2, 30))
    mask = torch.ones_like(ids)
    mask[1, -7:] = 0
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        x = model.embed.weight[ids]  # (B, T, d): T5 does not scale its embeddings
        shared = model.positions_for(torch.arange(30)[None].expand(2, 30))
        shared[0].key_valid = mask.bool()
        for block in model.layers:
            x = block(x, shared[0])
        got = model.final_norm(x)
    real = mask.bool()
    assert (got[real] - expected[real]).abs().max().item() < 1e-4


def test_a_cached_step_builds_the_biased_mask_once_for_every_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = {"vocab_size": 97, "d_model": 32, "n_layers": 3, "ffn.hidden": 64, "encoder": {"n_layers": 2}}
    heads = {f"{a}.{k}": v for a in ("attention", "cross_attention") for k, v in (("n_heads", 4), ("n_kv_heads", 4))}
    spec = zoo.spec("t5-small").override({**sizes, **heads, "attention.head_dim": 8, "cross_attention.head_dim": 8})
    model = zoo.build(spec, seed=0).eval()
    source, target = torch.randint(97, (1, 5)), torch.randint(97, (1, 4))
    calls = []
    original = RelativeBuckets.last_query_bias
    monkeypatch.setattr(RelativeBuckets, "last_query_bias", lambda self, *a: calls.append(1) or original(self, *a))
    with torch.no_grad():
        memory = model.encode(source)
        full = model(target, memory=memory)  # (1, T, V)
        cache = KVCache(model, 1, 6, memory_len=5)
        prefill(model, target[:, :1], cache, memory=memory)
        calls.clear()
        step = decode_step(model, target[:, 1:2], cache)
    assert len(calls) == 1  # three decoder layers, one bias
    torch.testing.assert_close(step, full[:, 1], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_the_lookup_equals_the_formula_past_max_distance_and_on_meta(bidirectional: bool) -> None:
    table = RelativeBuckets(2, 16, 40, bidirectional=bidirectional)
    relative = torch.arange(-500, 501)[None, None]  # (1, 1, S): far beyond max_distance both ways
    expected = relative_position_bucket(relative, bidirectional, 16, 40)
    assert torch.equal(table._bucket(relative), expected)
    assert table._bucket(relative.to("meta")).shape == relative.shape  # a table per device


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_decode_steps_bias_from_the_kept_table_is_score_bias(bidirectional: bool, dtype: torch.dtype) -> None:
    """Steps past the table's first length and past max_distance, a weight changed in place
    (through ``.data`` too, which no version counter sees), and autograd (score_bias itself)."""
    table = RelativeBuckets(4, 16, 40, bidirectional=bidirectional)

    def expected(n_keys: int) -> torch.Tensor:
        keys = torch.arange(n_keys)[None]  # (1, S)
        return table.score_bias(keys[:, -1:], keys, 4).to(dtype)  # (1, H, 1, S)

    with torch.no_grad():
        for n_keys in (1, 7, 256, 300, 1000):
            got = table.last_query_bias(torch.arange(n_keys), 4, dtype)
            assert got.is_contiguous() and torch.equal(got, expected(n_keys))
        table.weight.mul_(3.0)
        assert torch.equal(table.last_query_bias(torch.arange(50), 4, dtype), expected(50))
        table.weight.data.add_(1.0)
        assert torch.equal(table.last_query_bias(torch.arange(50), 4, dtype), expected(50))
    bias = table.last_query_bias(torch.arange(20), 4, torch.float32)
    bias.sum().backward()
    assert table.weight.grad is not None and table.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="4 heads"):
        table.last_query_bias(torch.arange(20), 8, dtype)

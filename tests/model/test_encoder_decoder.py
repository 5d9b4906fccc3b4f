"""Encoder-decoder models: the spec, the cache of self and cross K/V, cached decoding equal
to the full forward for every step, generation, and the original Transformer preset."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill

TINY = {
    "vocab_size": 97,
    "d_model": 32,
    "n_layers": 2,
    "ffn.hidden": 64,
    "encoder": {"n_layers": 3, "final_norm": False},
    "attention.n_heads": 4,
    "attention.n_kv_heads": 4,
    "attention.head_dim": 8,
    "cross_attention.n_heads": 4,
    "cross_attention.n_kv_heads": 4,
    "cross_attention.head_dim": 8,
}


def tiny(**changes):  # type: ignore[no-untyped-def]
    return zoo.spec("transformer-base").override({**TINY, **changes})


@pytest.mark.parametrize("block", ["post_norm", "pre_norm"])
def test_cached_decoding_equals_the_full_forward_for_every_step(block):
    spec = tiny(**{"block.kind": block, "final_norm": block == "pre_norm"})
    model = zoo.build(spec, seed=0).eval()
    torch.manual_seed(0)
    source = torch.randint(97, (2, 7))
    source_mask = torch.ones(2, 7, dtype=torch.long)
    source_mask[1, 5:] = 0  # padding in the encoder's batch
    target = torch.randint(97, (2, 6))
    with torch.no_grad():
        memory = model.encode(source, source_mask)
        full = model(target, memory=memory)  # (B, T, V)
        cache = KVCache(model, 2, 8, memory_len=7)
        steps = [prefill(model, target[:, :1], cache, memory=memory)]
        steps += [decode_step(model, target[:, t : t + 1], cache) for t in range(1, 6)]
    torch.testing.assert_close(torch.stack(steps, dim=1), full, atol=1e-5, rtol=1e-4)
    # a two-token first chunk, then steps: the same
    cache.reset()
    with torch.no_grad():
        chunk = prefill(model, target[:, :2], cache, memory=memory)
    torch.testing.assert_close(chunk, full[:, 1], atol=1e-5, rtol=1e-4)


def test_padding_in_the_source_changes_nothing_for_its_row():
    model = zoo.build(tiny(), seed=0).eval()
    source = torch.randint(97, (1, 5))
    padded = torch.cat((source, torch.zeros(1, 3, dtype=torch.long)), dim=1)
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0, 0]])
    target = torch.randint(97, (1, 4))
    with torch.no_grad():
        alone = model(target, memory=model.encode(source))
        batch = model(target, memory=model.encode(padded, mask))
    torch.testing.assert_close(batch, alone, atol=1e-5, rtol=1e-4)


def test_the_cache_holds_self_kv_per_token_and_cross_kv_per_encoder_token():
    spec = tiny()
    model = zoo.build(spec, seed=0)
    assert [path for path, _ in model.stateful_modules()] == [
        "layers.0.attention",
        "layers.0.cross_attention",
        "layers.1.attention",
        "layers.1.cross_attention",
    ]
    got = zoo.cache_bytes(spec, batch_size=2, context_len=10, memory_len=7, dtype="float32")
    per_layer = 2 * 4 * 8 * 4  # K and V, 4 heads of 8, float32
    assert (got.token, got.sequence, got.memory) == (2 * 2 * 10 * per_layer, 0, 2 * 2 * 7 * per_layer)
    assert KVCache(model, 2, 10, memory_len=7).nbytes == got.total
    assert zoo.cross_kv_bytes(spec, 7, batch_size=2, dtype="float32") == got.memory
    assert zoo.kv_bytes_per_token(spec, dtype="float32") == 2 * per_layer


def test_generate_encodes_once_and_returns_the_decoder_ids():
    model = zoo.build(tiny(), seed=0).eval()
    source = torch.randint(97, (2, 6))
    out = zoo.generate(model, source, max_new_tokens=5)
    assert out.shape == (2, 6) and bool((out[:, 0] == 0).all())  # decoder_start_token_id
    with torch.no_grad():  # greedy, recomputed without a cache
        memory = model.encode(source)
        ids = out[:, :1]
        for _ in range(5):
            ids = torch.cat((ids, model(ids, memory=memory)[:, -1].argmax(-1, keepdim=True)), dim=1)
    assert torch.equal(out, ids)


def test_original_transformer_preset():
    spec = zoo.spec("transformer-base")
    model = zoo.build(spec, device="meta")
    assert spec.encoder is not None and spec.encoder.n_layers == 6 and spec.n_layers == 6
    assert len(model.encoder.layers) == 6 and not any(m.causal for m in (b.attention for b in model.encoder.layers))
    assert all(m.causal for m in model.attention_modules)
    count = zoo.count_params(spec)
    d, V, F = 512, 37000, 2048
    attention = 4 * (d * d + d)
    ffn = 2 * d * F + F + d
    encoder = 6 * (attention + ffn + 2 * 2 * d)
    decoder = 6 * (2 * attention + ffn + 3 * 2 * d)
    assert count.total == V * d + encoder + decoder == 63_082_496


def test_spec_errors_name_the_field():
    with pytest.raises(zoo.errors.SpecError, match="cross_attention: required when encoder is set"):
        zoo.spec("gpt2").override({"encoder": {"n_layers": 2}})
    with pytest.raises(zoo.errors.SpecError, match="encoder: required when cross_attention is set"):
        zoo.spec("gpt2").override({"cross_attention": {"kind": "mha", "n_heads": 12}})
    with pytest.raises(zoo.errors.SpecError, match="block.kind: parallel blocks take no cross-attention"):
        zoo.build(tiny(**{"block.kind": "parallel"}), device="meta")
    model = zoo.build(tiny(), seed=0)
    with pytest.raises(zoo.errors.GenerationError, match="memory: an encoder-decoder needs the encoder output"):
        model(torch.tensor([[1, 2]]))
    with pytest.raises(zoo.errors.SpecError, match="encode: this model has no encoder"):
        zoo.build(zoo.spec("gpt2").override({"n_layers": 1}), device="meta").encode(torch.tensor([[1]]))


def test_flops_split_encoder_and_decoder():
    from zoo.analysis.counts import encoder_flops, forward_flops

    spec = tiny()
    cross = forward_flops(spec, 1, 10, memory_len=7) - forward_flops(spec, 1, 10, memory_len=0)
    assert cross == 2 * 4 * 4 * 8 * 7  # 2 layers, q·k and p·v over 7 memory tokens
    d, F = 32, 64
    layer = 4 * (d * d + d) + 2 * d * F + F + d
    assert encoder_flops(spec, 5) == 2 * 3 * layer * 5 + 3 * 4 * 4 * 8 * 25
    assert encoder_flops(zoo.spec("gpt2"), 5) == 0


def test_weights_read_split_between_encoder_and_decoder():
    """A decoder step reads the decoder's weights (and the tied table, its head) but not the
    cross-attention K/V projections, which run once per prompt; the encoder pass reads the
    encoder's layers: with those projections, every weight of t5-small once."""
    from zoo.analysis.counts import weight_bytes_read
    from zoo.analysis.encoder import encoder_weight_bytes_read, memory_flops

    enc, dec = encoder_weight_bytes_read("t5-small", 512, "float32"), weight_bytes_read("t5-small", 1, "float32")
    cross_kv = 6 * 2 * 512 * 512  # 6 decoder layers x (K, V) projections, d_model 512 -> 8 heads x 64, no bias
    assert enc + dec + cross_kv * 4 == 60_506_624 * 4 and enc == 18_881_280 * 4  # 6 layers, norms and the bias table
    spec = tiny()
    # the cross K/V projected once from 7 memory tokens: 2 layers x (K, V) x 4 heads x 8 wide, over d = 32
    assert memory_flops(spec, 7, batch_size=2) == 2 * 32 * (2 * 2 * 4 * 8 * 7 * 2)
    assert memory_flops("gpt2", 7) == 0

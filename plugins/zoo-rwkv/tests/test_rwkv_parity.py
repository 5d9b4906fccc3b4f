"""zoo's RWKV against transformers' RwkvForCausalLM (pure-PyTorch path) on tiny random
checkpoints saved by transformers and loaded through zoo.from_pretrained."""

from __future__ import annotations

import json

import pytest
import torch
from rwkv_helpers import TINY, checkpoint, deterministic, hf_rwkv  # noqa: F401 (fixtures)

import zoo
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, left_pad, prefill

pytest.importorskip("transformers")


def test_logits_match_transformers(checkpoint):
    hf, _, model = checkpoint
    assert model.hf_model_type == "rwkv"
    ids = torch.randint(0, TINY["vocab_size"], (2, 70))  # more than one WKV chunk
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hf(ids, use_cache=False).logits, atol=1e-4, rtol=1e-4)


def test_logits_match_with_a_narrower_attention_and_default_rescaling(tmp_path):
    hf, folder = hf_rwkv(tmp_path, attention_hidden_size=24)
    model = zoo.from_pretrained(folder, progress=False)
    ids = torch.randint(0, TINY["vocab_size"], (2, 9))
    with torch.no_grad():  # transformers' cached path assumes attention_hidden == hidden: uncached
        torch.testing.assert_close(model(ids), hf(ids, use_cache=False).logits, atol=1e-4, rtol=1e-4)


def test_greedy_tokens_equal_transformers_generate(checkpoint):
    hf, _, model = checkpoint
    ids = torch.randint(1, TINY["vocab_size"], (3, 7))
    # one row at a time for transformers: its one-token step broadcasts the (B, d) shift state
    # against (B, 1, d) inputs, wrong for B > 1 (transformers 5.23); zoo's batch against its rows
    expected = torch.cat(
        [hf.generate(row[None], max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=0) for row in ids]
    )
    assert torch.equal(zoo.generate(model, ids, max_new_tokens=10), expected)


def test_prefill_then_decode_equals_full_forward(checkpoint):
    model = checkpoint[2]
    ids = torch.randint(0, TINY["vocab_size"], (2, 75))
    with torch.no_grad():
        full = model(ids)
    cache = KVCache(model, batch_size=2, max_len=75)
    steps = [prefill(model, ids[:, :3], cache), prefill(model, ids[:, 3:72], cache)]  # a scan-chunk boundary inside
    steps += [decode_step(model, ids[:, t : t + 1], cache) for t in range(72, 75)]
    torch.testing.assert_close(torch.stack(steps, dim=1), full[:, [2, 71, 72, 73, 74]], atol=1e-5, rtol=1e-5)


def test_left_padded_rows_equal_their_unpadded_runs(checkpoint):
    model = checkpoint[2]
    prompts = [torch.randint(0, TINY["vocab_size"], (n,)).tolist() for n in (7, 2, 5)]
    follow = torch.randint(0, TINY["vocab_size"], (3, 4))
    ids, mask = left_pad(prompts, pad_token_id=3)
    cache = KVCache(model, batch_size=3, max_len=11)
    batched = [prefill(model, ids, cache, attention_mask=mask)]
    batched += [decode_step(model, follow[:, t : t + 1], cache) for t in range(4)]
    logits = torch.stack(batched, dim=1)  # (B, 5, vocab)
    with torch.no_grad():
        uncached = model(ids, attention_mask=mask)[:, -1]  # the uncached forward honours the mask too
    for row, prompt in enumerate(prompts):
        with torch.no_grad():
            alone = model(torch.tensor([prompt + follow[row].tolist()]))[0, len(prompt) - 1 :]
        torch.testing.assert_close(logits[row], alone, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(uncached[row], alone[0], atol=1e-5, rtol=1e-5)


def test_reset_clears_the_state(checkpoint):
    model = checkpoint[2]
    first, second = torch.randint(0, TINY["vocab_size"], (2, 9)), torch.randint(0, TINY["vocab_size"], (2, 5))
    cache = KVCache(model, batch_size=2, max_len=9)
    prefill(model, first, cache)
    cache.reset()
    assert all(float(t.abs().sum()) == 0 for layer in cache.layers for t in layer.values())
    with torch.no_grad():
        expected = model(second)[:, -1]
    torch.testing.assert_close(prefill(model, second, cache), expected, atol=1e-5, rtol=1e-5)


def test_state_bytes_per_sequence():
    spec = zoo.ModelSpec.from_hf_config({**TINY, "model_type": "rwkv", "attention_hidden_size": 24})
    model = zoo.build(spec, device="meta")
    d, c, layers = TINY["hidden_size"], 24, TINY["num_hidden_layers"]
    per_layer = 4 * (d + d + 3 * c)  # att_x, ffn_x in float32; num, den, max always float32
    short, long = (zoo.cache_bytes(model, 1, n, dtype="float32") for n in (4, 80))
    assert short.sequence == long.sequence == zoo.state_bytes(model, dtype="float32") == layers * per_layer
    assert long.token == 0 and zoo.kv_bytes_per_token(model) == 0
    assert zoo.state_bytes(model, batch_size=3, dtype="bfloat16") == 3 * layers * (2 * 2 * d + 4 * 3 * c)
    assert KVCache(zoo.build(spec, seed=0), 1, 40, dtype=torch.float32).nbytes == layers * per_layer


def test_config_and_weights_round_trip_through_save_pretrained(checkpoint, tmp_path):
    import transformers

    hf, folder, model = checkpoint
    spec = zoo.ModelSpec.from_hf_config(folder / "config.json")
    assert (spec.attention.kind, spec.ffn.kind, spec.block.kind) == ("rwkv", "rwkv", "rwkv")
    assert spec.block.rescale_every == 1 and spec.max_seq_len == TINY["context_length"]
    out = zoo.save_pretrained(model, tmp_path / "saved")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["RwkvForCausalLM"] and config["model_type"] == "rwkv"
    again = transformers.RwkvForCausalLM.from_pretrained(out).eval()
    ids = torch.randint(0, TINY["vocab_size"], (1, 12))
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, hf(ids).logits, atol=1e-5, rtol=1e-5)
    fresh = zoo.build(spec, seed=0)  # a spec built from scratch saves too (model_type found by trying)
    assert (
        json.loads((zoo.save_pretrained(fresh, tmp_path / "fresh") / "config.json").read_text())["model_type"] == "rwkv"
    )


def test_compiled_decode_step_equals_eager_without_recompiling(checkpoint):
    import torch._dynamo

    from zoo.model.generation import compile_decode_step

    model = checkpoint[2]
    ids, mask = left_pad([[5, 9, 2, 7, 7, 1], [11, 4]])
    eager_cache, compiled_cache = KVCache(model, 2, 12), KVCache(model, 2, 12)
    eager = prefill(model, ids, eager_cache, attention_mask=mask)
    prefill(model, ids, compiled_cache, attention_mask=mask)
    torch._dynamo.reset()
    step = compile_decode_step(backend="aot_eager")
    token = eager.argmax(-1, keepdim=True)  # (B, 1)
    for i in range(3):
        eager = decode_step(model, token, eager_cache)
        with torch._dynamo.config.patch(error_on_recompile=i > 0):
            compiled = step(model, token, compiled_cache)
        torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)
        token = eager.argmax(-1, keepdim=True)

"""prefill + decode_step against the full forward pass, for every combination of parts."""

from __future__ import annotations

import itertools

import pytest
import torch

import zoo
from tests.generation_checks import _one_thread, check_left_padded_decode  # noqa: F401 (autouse fixture)
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, left_pad, prefill
from zoo.specs.model import ModelSpec

VOCAB = 61
POSITIONAL = {
    "learned": {"kind": "learned"},
    "sinusoidal": {"kind": "sinusoidal"},
    "rope": {"kind": "rope"},
    "rope-llama3": {
        "kind": "rope",
        "theta": 500000.0,
        "scaling": {"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8},
    },
    "rope-yarn": {"kind": "rope", "scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}},
    "rope-partial": {"kind": "rope", "partial_rotary_factor": 0.5},
    "alibi": {"kind": "alibi"},
    "none": {"kind": "none"},
}
KV_HEADS = {"mha": 4, "gqa": 2, "mqa": 1}
FFN = {"swiglu": {"kind": "swiglu", "hidden": 24}, "moe": {"kind": "moe", "n_experts": 4, "top_k": 2, "hidden": 16}}
WINDOW = 4
GRID = list(itertools.product(KV_HEADS, (None, WINDOW), (False, True), (False, True), POSITIONAL, FFN))


def grid_spec(
    attention: str, window: int | None, sinks: bool, qk_norm: bool, positional: str, ffn: str, n_layers: int = 2
) -> ModelSpec:
    return ModelSpec.model_validate(
        {
            "name": f"grid-{attention}-{window}-{sinks}-{qk_norm}-{positional}-{ffn}-{n_layers}",
            "vocab_size": VOCAB,
            "d_model": 32,
            "n_layers": n_layers,
            "max_seq_len": 32,
            "norm": {"kind": "rmsnorm"},
            "positional": POSITIONAL[positional],
            "attention": {
                "kind": attention,
                "n_heads": 4,
                "n_kv_heads": KV_HEADS[attention],
                "head_dim": 8,
                "window": window,
                "sinks": sinks,
                "qk_norm": qk_norm,
            },
            "ffn": FFN[ffn],
            "block": {"kind": "pre_norm"},
        }
    )


def grid_model(*combination, n_layers: int = 2) -> zoo.model.build.ZooModel:
    model = zoo.build(grid_spec(*combination, n_layers=n_layers), seed=0).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("sinks"):
                param.normal_()  # zero sinks would hide a sink-path bug
    return model


@pytest.mark.parametrize("combination", GRID, ids=["-".join(map(str, c)) for c in GRID])
def test_prefill_then_decode_equals_full_forward(combination):
    # one layer keeps 384 cases fast; the multi-layer cache is covered by the presets'
    # test in test_cache.py and the chunked / padded tests below
    model = grid_model(*combination, n_layers=1)
    ids = torch.randint(0, VOCAB, (2, 8))  # prefill 5 > window, then decode 3 around the ring
    with torch.no_grad():
        full = model(ids)  # (B, T, vocab)
    cache = KVCache(model, batch_size=2, max_len=8)
    steps = [prefill(model, ids[:, :5], cache)]
    steps += [decode_step(model, ids[:, t : t + 1], cache) for t in range(5, 8)]
    torch.testing.assert_close(torch.stack(steps, dim=1), full[:, 4:], atol=1e-5, rtol=1e-5)


# recurrent and hybrid stacks: prefill + decode, chunked prefill and left padding as above
GQA = {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2, "head_dim": 8}
MAMBA = {"kind": "mamba", "d_state": 4, "d_conv": 3}
MIXERS = {
    "mamba": {"attention": MAMBA, "ffn": {"kind": "none"}, "positional": {"kind": "none"}},
    "mamba-moe": {"attention": MAMBA, "ffn": FFN["moe"], "positional": {"kind": "none"}},
    "mamba-then-gqa": {
        "attention": MAMBA,
        "ffn": FFN["swiglu"],
        "positional": {"kind": "rope"},
        "layers": {"1::2": {"attention": GQA}},
    },
    "windowed-gqa-then-mamba": {
        "attention": {**GQA, "window": WINDOW},
        "ffn": {"kind": "none"},
        "positional": {"kind": "alibi"},
        "layers": {"1::2": {"attention": MAMBA}},
    },
    "linear-rope": {
        "attention": {"kind": "linear", "n_heads": 4, "head_dim": 8},
        "ffn": FFN["swiglu"],
        "positional": {"kind": "rope"},
    },
    "linear-then-mamba": {
        "attention": {"kind": "linear", "n_heads": 2},
        "ffn": FFN["moe"],
        "positional": {"kind": "none"},
        "layers": {"1": {"attention": MAMBA}},
    },
    "infini-delta-then-gqa": {
        "attention": {"kind": "infini", "n_heads": 4, "segment": 4, "update": "delta"},
        "ffn": FFN["swiglu"],
        "positional": {"kind": "none"},
        "layers": {"1": {"attention": GQA}},
    },
}


def mixer_model(name: str, n_layers: int = 2) -> zoo.model.build.ZooModel:
    spec = ModelSpec.model_validate(
        {
            "name": f"mixers-{name}-{n_layers}",
            "vocab_size": VOCAB,
            "d_model": 32,
            "n_layers": n_layers,
            "max_seq_len": 32,
            "norm": {"kind": "rmsnorm"},
            "block": {"kind": "pre_norm"},
            **MIXERS[name],
        }
    )
    return zoo.build(spec, seed=0).eval()


@pytest.mark.parametrize("name", MIXERS)
def test_recurrent_and_hybrid_stacks_decode_as_their_full_forward(name):
    model = mixer_model(name)
    ids = torch.randint(0, VOCAB, (2, 12))
    with torch.no_grad():
        full = model(ids)
    cache = KVCache(model, batch_size=2, max_len=12)
    last = [prefill(model, ids[:, a:b], cache) for a, b in ((0, 5), (5, 6), (6, 9))]  # chunks, one of one token
    last += [decode_step(model, ids[:, t : t + 1], cache) for t in range(9, 12)]
    torch.testing.assert_close(torch.stack(last, dim=1), full[:, [4, 5, 8, 9, 10, 11]], atol=1e-5, rtol=1e-5)
    cache.reset()  # the recurrent state is forgotten: the same prompt gives the same logits
    torch.testing.assert_close(prefill(model, ids[:, :5], cache), full[:, 4], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", MIXERS)
def test_recurrent_and_hybrid_left_padded_rows_equal_their_unpadded_runs(name):
    check_left_padded_decode(mixer_model(name), VOCAB, n_follow=4)


@pytest.mark.parametrize("name", MIXERS)
def test_uncached_left_padding_leaves_recurrent_rows_as_alone(name):
    """Without a cache the attention_mask reaches the mixers as Positions.key_valid, and
    positions count real tokens (tests/model/test_model_padding.py covers every positional)."""
    model = mixer_model(name)
    ids = torch.tensor([[3, 3, 5, 9, 2], [1, 2, 5, 9, 2]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    with torch.no_grad():
        padded = model(ids, attention_mask=mask)[0, 2:]
        alone = model(ids[:1, 2:])[0]
    torch.testing.assert_close(padded, alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("positional", ["learned", "rope", "alibi"])
def test_chunked_prefill_equals_full_forward(window, positional):
    """Chunks shorter and longer than the window, after something is already cached."""
    model = grid_model("gqa", window, True, False, positional, "moe")
    ids = torch.randint(0, VOCAB, (2, 12))
    with torch.no_grad():
        full = model(ids)
    cache = KVCache(model, batch_size=2, max_len=12)
    last = [prefill(model, ids[:, a:b], cache) for a, b in ((0, 2), (2, 4), (4, 9))]
    last += [decode_step(model, ids[:, t : t + 1], cache) for t in range(9, 12)]
    torch.testing.assert_close(torch.stack(last, dim=1), full[:, [1, 3, 8, 9, 10, 11]], atol=1e-5, rtol=1e-5)


PADDED = [("gqa", WINDOW, True, True, p, "moe") for p in POSITIONAL] + [("mqa", None, False, False, "alibi", "swiglu")]


@pytest.mark.parametrize("combination", PADDED, ids=["-".join(map(str, c)) for c in PADDED])
def test_left_padded_rows_equal_their_unpadded_runs(combination):
    model = grid_model(*combination)
    prompts = [torch.randint(0, VOCAB, (n,)).tolist() for n in (7, 2, 5)]
    follow = torch.randint(0, VOCAB, (3, 6))  # tokens decoded after each prompt
    ids, mask = left_pad(prompts, pad_token_id=3)
    cache = KVCache(model, batch_size=3, max_len=7 + 6)
    batched = [prefill(model, ids, cache, attention_mask=mask)]
    batched += [decode_step(model, follow[:, t : t + 1], cache) for t in range(6)]
    batched_logits = torch.stack(batched, dim=1)  # (B, 7, vocab)
    for row, prompt in enumerate(prompts):
        alone = torch.tensor([prompt + follow[row].tolist()])
        with torch.no_grad():
            full = model(alone)[0, len(prompt) - 1 :]  # (7, vocab)
        torch.testing.assert_close(batched_logits[row], full, atol=1e-5, rtol=1e-5)


def test_batched_greedy_generation_equals_each_prompt_alone():
    model = grid_model("gqa", WINDOW, True, True, "rope", "moe")
    prompts = [[5, 9, 2, 7, 7, 1, 30], [11, 4], [8, 8, 8, 20, 3]]
    batched = zoo.generate(model, prompts, max_new_tokens=8)
    assert batched.shape == (3, 7 + 8)
    for row, prompt in enumerate(prompts):
        alone = zoo.generate(model, torch.tensor(prompt), max_new_tokens=8)  # (1, len + 8)
        assert batched[row, -8:].tolist() == alone[0, -8:].tolist()
        assert batched[row, 7 - len(prompt) : 7].tolist() == prompt


def test_generated_tokens_are_the_argmax_of_the_full_forward():
    model = grid_model("mha", None, False, False, "learned", "swiglu")
    ids = torch.randint(0, VOCAB, (2, 4))
    out = zoo.generate(model, ids, max_new_tokens=5)
    with torch.no_grad():
        logits = model(out[:, :-1])  # (B, 8, vocab)
    assert torch.equal(out[:, 4:], logits[:, 3:].argmax(-1))


def test_rows_stop_at_eos_and_are_padded():
    model = grid_model("gqa", None, False, False, "rope", "swiglu")
    ids = torch.randint(0, VOCAB, (2, 3))
    free = zoo.generate(model, ids, max_new_tokens=6)
    eos = int(free[0, 4])  # row 0's second new token
    out = zoo.generate(model, ids, max_new_tokens=6, eos_token_id=[eos], pad_token_id=0)
    stop = free[0, 3:].tolist().index(eos)  # first eos in row 0
    assert out[0, 3 + stop] == eos and (out[0, 4 + stop :] == 0).all()
    row1 = free[1, 3:].tolist()
    if eos not in row1:
        assert out[1, 3:].tolist() == row1  # row 1 runs on until max_new_tokens


def test_stream_yields_one_token_per_row_per_step():
    model = grid_model("mqa", None, False, False, "alibi", "swiglu")
    ids = torch.randint(0, VOCAB, (2, 3))
    steps = list(zoo.model.generation.stream(model, ids, max_new_tokens=4))
    assert [tuple(s.shape) for s in steps] == [(2,)] * 4
    assert torch.equal(torch.stack(steps, 1), zoo.generate(model, ids, max_new_tokens=4)[:, 3:])
    with pytest.raises(zoo.errors.GenerationError, match="top_p"):
        zoo.model.generation.stream(model, ids, top_p=2.0)  # raised on the call, before any step


def test_seeded_sampling_repeats_and_seeds_differ():
    model = grid_model("gqa", None, False, False, "rope", "swiglu")
    ids = torch.randint(0, VOCAB, (2, 3))
    kw = {"max_new_tokens": 12, "temperature": 1.5, "top_k": 40, "top_p": 0.95}
    first, again = zoo.generate(model, ids, seed=1, **kw), zoo.generate(model, ids, seed=1, **kw)
    assert torch.equal(first, again)
    assert not torch.equal(first, zoo.generate(model, ids, seed=2, **kw))
    greedy = zoo.generate(model, ids, max_new_tokens=12)
    assert torch.equal(zoo.generate(model, ids, max_new_tokens=12, temperature=1.0, top_k=1, seed=0), greedy)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"input_ids": torch.zeros(1, 30, dtype=torch.long), "max_new_tokens": 3}, "max_seq_len=32"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"input_ids": torch.tensor([[1, VOCAB]])}, r"\[0, 61\)"),
        (
            {"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": torch.tensor([[1, 1, 0], [1, 1, 1]])},
            "left-padded",
        ),
        ({"input_ids": [[1, 2], []]}, "at least one token"),
    ],
)
def test_bad_generation_arguments_are_clear_errors(kwargs, match):
    model = grid_model("gqa", None, False, False, "rope", "swiglu")
    kwargs = {"input_ids": torch.ones(1, 3, dtype=torch.long), "max_new_tokens": 3, **kwargs}
    with pytest.raises(zoo.errors.GenerationError, match=match):
        zoo.generate(model, **kwargs)


def test_prefill_rejects_a_prompt_longer_than_the_context_or_the_cache():
    model = grid_model("gqa", None, False, False, "rope", "swiglu")
    with pytest.raises(zoo.errors.GenerationError, match="max_seq_len=32"):
        prefill(model, torch.zeros(1, 33, dtype=torch.long), KVCache(model, 1, 40))
    small = KVCache(model, 1, 4)
    with pytest.raises(zoo.errors.GenerationError, match="max_len=4"):
        prefill(model, torch.zeros(1, 5, dtype=torch.long), small)
    prefill(model, torch.zeros(1, 4, dtype=torch.long), small)
    with pytest.raises(zoo.errors.GenerationError, match="max_len=4"):
        decode_step(model, torch.zeros(1, 1, dtype=torch.long), small)
    with pytest.raises(zoo.errors.GenerationError, match="batch_size=1"):
        prefill(model, torch.zeros(2, 2, dtype=torch.long), KVCache(model, 1, 8))

"""The uncached forward with an attention_mask: a decoder's padded row gives, on its real
tokens, the logits the row gives alone (positions count real tokens, recurrent state skips
padding); an encoder numbers slots, padding or not (as transformers' encoders do)."""

from __future__ import annotations

import pytest
import torch

import zoo
from tests.generation_checks import _one_thread  # noqa: F401 (autouse fixture)
from zoo.model.cache import KVCache
from zoo.model.generation import left_pad, prefill
from zoo.specs.model import ModelSpec

VOCAB = 61
GQA = {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2, "head_dim": 8}
MAMBA = {"kind": "mamba", "d_state": 4, "d_conv": 3}
ROPE = {"kind": "rope"}
NONE = {"kind": "none"}
SPECS = {  # name -> (positional, attention, per-layer overrides)
    "learned": ({"kind": "learned"}, GQA, {}),
    "learned-windowed": ({"kind": "learned"}, {**GQA, "window": 3}, {}),
    "sinusoidal": ({"kind": "sinusoidal"}, GQA, {}),
    "rope": (ROPE, GQA, {}),
    "rope-partial-yarn": (
        {
            "kind": "rope",
            "partial_rotary_factor": 0.5,
            "scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
        },
        GQA,
        {},
    ),
    "alibi": ({"kind": "alibi"}, GQA, {}),
    "mamba": (NONE, MAMBA, {}),
    "mamba2": (
        NONE,
        {"kind": "mamba2", "n_heads": 4, "head_dim": 16, "n_groups": 2, "state_size": 8, "chunk_size": 4},
        {},
    ),
    "linear-rope": (ROPE, {"kind": "linear", "n_heads": 4, "head_dim": 8}, {}),
    "gated_deltanet": (
        NONE,
        {"kind": "gated_deltanet", "n_k_heads": 2, "n_v_heads": 4, "head_k_dim": 8, "head_v_dim": 6, "chunk_size": 4},
        {},
    ),
    "infini-rope": (ROPE, {"kind": "infini", "n_heads": 4, "segment": 4, "update": "delta"}, {}),
    "mamba-then-learned-gqa": ({"kind": "learned"}, MAMBA, {"1": {"attention": GQA}}),
    "mamba-then-rope-gqa": (ROPE, MAMBA, {"1": {"attention": GQA}}),
}
PROMPTS = (9, 3, 6)


def tiny(name: str, causal: bool = True) -> zoo.model.build.ZooModel:
    positional, attention, layers = SPECS[name]
    spec = ModelSpec.model_validate(
        {
            "name": f"padding-{name}",
            "vocab_size": VOCAB,
            "d_model": 32,
            "n_layers": 2,
            "max_seq_len": 32,
            "norm": {"kind": "rmsnorm"},
            "positional": positional,
            "attention": {**attention, **({} if causal else {"causal": False})},
            "ffn": {"kind": "swiglu", "hidden": 24},
            "block": {"kind": "pre_norm"},
            "layers": layers,
        }
    )
    return zoo.build(spec, seed=0).eval()


def right_pad(prompts: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.tensor([p + [pad_token_id] * (width - len(p)) for p in prompts])
    mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in prompts])
    return ids, mask


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_rows_give_the_logits_of_each_row_alone(name, side):
    model = tiny(name)
    prompts = [torch.randint(0, VOCAB, (n,)).tolist() for n in PROMPTS]
    ids, mask = left_pad(prompts, pad_token_id=3) if side == "left" else right_pad(prompts, pad_token_id=3)
    with torch.no_grad():
        padded = model(ids, attention_mask=mask)  # (B, T, vocab)
        for row, prompt in enumerate(prompts):
            alone = model(torch.tensor([prompt]))[0]  # (n, vocab)
            torch.testing.assert_close(padded[row][mask[row].bool()], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["learned", "rope", "mamba-then-rope-gqa"])
def test_uncached_and_cached_prefill_agree_on_a_left_padded_batch(name):
    model = tiny(name)
    ids, mask = left_pad([torch.randint(0, VOCAB, (n,)).tolist() for n in PROMPTS], pad_token_id=3)
    cache = KVCache(model, batch_size=len(PROMPTS), max_len=ids.shape[1])
    with torch.no_grad():
        uncached = model(ids, attention_mask=mask)[:, -1]  # (B, vocab)
    torch.testing.assert_close(prefill(model, ids, cache, attention_mask=mask), uncached, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["learned", "sinusoidal"])  # absolute: a shift would change outputs
def test_an_encoder_numbers_slots_whatever_the_padding(name):
    """Bidirectional stacks keep transformers' encoder positions (arange; BertModel and
    ModernBERT do not shift by padding): the mask only hides keys."""
    model = tiny(name, causal=False)
    ids, mask = left_pad([[5, 9, 2, 7], [11, 4]], pad_token_id=3)
    slots = torch.arange(ids.shape[1])[None].expand_as(ids)
    with torch.no_grad():
        got = model(ids, attention_mask=mask)
        torch.testing.assert_close(got, model(ids, slots, attention_mask=mask))
        shifted = model(ids, (slots - 2).clamp(min=0), attention_mask=mask)
    assert not torch.allclose(got[1, 2:], shifted[1, 2:], atol=1e-4)

"""zoo.fuse_projections: q|k|v and gate|up as one Linear each, exact, names unchanged."""

from __future__ import annotations

import pytest
import torch

import zoo
from tests.conftest import tiny_spec
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill
from zoo.quant import quantize


def _pair(name: str, dtype: str = "float32", mixer: str | None = None) -> tuple[torch.nn.Module, torch.nn.Module]:
    spec = tiny_spec(name)
    if mixer is not None:
        spec = spec.override({"attention.kind": mixer})
    return (zoo.build(spec, dtype=dtype, seed=3).eval(), zoo.build(spec, dtype=dtype, seed=3).eval())


@pytest.mark.parametrize(
    ("name", "mixer"),
    [
        ("llama-3.2-1b", None),
        ("qwen3-0.6b", None),
        ("gpt-oss-20b", None),
        ("qwen3-next-80b-a3b", None),
        ("gpt2", "linear"),  # the kernel-attention kinds fuse q|k|v too
        ("gpt2", "infini"),
    ],
)
def test_fused_logits_equal_unfused(name, mixer):
    plain, fused = _pair(name, mixer=mixer)
    count = zoo.fuse_projections(fused)
    assert count > 0
    assert not any(n.endswith((".q_proj.weight", ".gate_proj.weight")) for n, _ in fused.named_parameters())
    assert mixer is None or any(n.endswith(".attention.qkv_proj.weight") for n, _ in fused.named_parameters())
    ids = torch.randint(0, 97, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(fused(ids), plain(ids), atol=1e-5, rtol=0)
        caches = [KVCache(m, 2, 12) for m in (plain, fused)]
        first = [prefill(m, ids, c) for m, c in zip((plain, fused), caches)]
        torch.testing.assert_close(first[1], first[0], atol=1e-5, rtol=0)
        token = first[0].argmax(-1, keepdim=True)  # (B, 1): one-row products on the decode path
        steps = [decode_step(m, token[:1].expand(2, 1), c) for m, c in zip((plain, fused), caches)]
        torch.testing.assert_close(steps[1], steps[0], atol=1e-5, rtol=0)


def test_state_dict_keeps_unfused_names_and_loads_back():
    plain, fused = _pair("llama-3.2-1b")
    zoo.fuse_projections(fused)
    saved = fused.state_dict()
    reference = plain.state_dict()
    assert list(sorted(saved)) == list(sorted(reference))
    for key, value in reference.items():
        assert torch.equal(saved[key], value), key
    other = zoo.build(tiny_spec("llama-3.2-1b"), dtype="float32", seed=4).eval()
    zoo.fuse_projections(other)
    other.load_state_dict(reference)  # strict: the parts' names land in the fused weights
    ids = torch.randint(0, 97, (1, 5))
    with torch.no_grad():
        assert torch.equal(other(ids), fused(ids))


def test_save_and_load_pretrained_of_a_fused_model(tmp_path):
    plain, fused = _pair("qwen3-0.6b")
    zoo.fuse_projections(fused)
    zoo.save_pretrained(fused, tmp_path / "ckpt")
    loaded = zoo.from_pretrained(str(tmp_path / "ckpt"), dtype="float32", progress=False).eval()
    ids = torch.randint(0, 97, (1, 6))
    with torch.no_grad():
        assert torch.equal(loaded(ids), plain(ids))


def test_idempotent():
    _, fused = _pair("llama-3.2-1b")
    first = zoo.fuse_projections(fused)
    assert first == 2 * 2 and zoo.fuse_projections(fused) == 0  # 2 layers x (qkv, gate|up)


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_quantized_parts_stack_by_rows_to_the_same_outputs_and_state(kind):
    """zoo's int8 and CPU int4 layers stack their rows (packed values, scales, offsets), so a
    quantized model fuses as a float one: the same decode logits (each output row the same
    product), the parts' names in its state dict, and that state loads back."""
    spec = tiny_spec("llama-3.2-1b").override({"ffn.hidden": 64})  # int4 groups of 32 inputs
    build = lambda: quantize(zoo.build(spec, dtype="bfloat16", seed=3).eval(), kind)
    plain, fused = build(), build()
    assert zoo.fuse_projections(fused) == 2 * 2
    assert type(fused.layers[0].attention.qkv_proj) is type(plain.layers[0].attention.q_proj)
    ids = torch.randint(0, 97, (1, 30))  # 30 rows: a prompt's products (int8: widened tiles)
    with torch.no_grad():
        caches = [KVCache(m, 1, 34, dtype=torch.bfloat16) for m in (plain, fused)]
        first = [prefill(m, ids, c) for m, c in zip((plain, fused), caches)]
        torch.testing.assert_close(first[1], first[0])
        token = first[0].argmax(-1, keepdim=True)  # (1, 1)
        steps = [decode_step(m, token, c) for m, c in zip((plain, fused), caches)]
        assert torch.equal(steps[1], steps[0])  # one row: every output the same dot product
    saved, reference = fused.state_dict(), plain.state_dict()
    assert sorted(saved) == sorted(reference)
    assert all(torch.equal(saved[key], value) for key, value in reference.items())
    other = build()
    zoo.fuse_projections(other)
    other.load_state_dict(reference)  # strict: the parts' tensors land in the stacked ones
    assert all(torch.equal(a, b) for a, b in zip(other.state_dict().values(), saved.values(), strict=True))


def test_parts_of_different_kinds_are_left_alone():
    model = zoo.build(tiny_spec("llama-3.2-1b"), dtype="bfloat16", seed=3).eval()
    quantize(model, "int8")
    attention = model.layers[0].attention
    attention.k_proj = torch.nn.Linear(attention.k_proj.in_features, attention.k_proj.out_features)  # not zoo's
    zoo.fuse_projections(model)
    assert not hasattr(attention, "qkv_proj") and hasattr(model.layers[1].attention, "qkv_proj")

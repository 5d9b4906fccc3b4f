"""Positional modules of a stack: shared per (positional spec, what the kind reads of its
layer), never by layer index; the stack's input takes the one that embeds positions."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.errors import SpecError
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill
from zoo.model.stack import PartFamilies, build_component, context
from zoo.specs.interfaces import Positions
from zoo.specs.model import ModelSpec

VOCAB = 61
GQA = {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2, "head_dim": 8}
MAMBA = {"kind": "mamba", "d_state": 4, "d_conv": 3}
# a recurrent first layer, then attention layers whose rotations differ in width, theta and
# scaling; layer 6 repeats layer 1's configuration and must share its module
ROPE_LAYERS = {
    "0": {"attention": MAMBA},
    "1,6": {"attention": GQA},
    "2": {"attention": {**GQA, "n_heads": 2, "n_kv_heads": 1, "head_dim": 16}},
    "3": {"attention": GQA, "positional": {"partial_rotary_factor": 0.5}},
    "4": {"attention": GQA, "positional": {"theta": 500.0, "scaling": {"type": "linear", "factor": 2.0}}},
    "5": {"attention": GQA, "positional": {"theta": 1000000.0, "interleaved": True}},
}


def tiny(name: str, positional: dict, layers: dict, n_layers: int = 7, attention: dict | None = None) -> ModelSpec:
    return ModelSpec.model_validate(
        {
            "name": name,
            "vocab_size": VOCAB,
            "d_model": 32,
            "n_layers": n_layers,
            "max_seq_len": 32,
            "norm": {"kind": "rmsnorm"},
            "positional": positional,
            "attention": attention or GQA,
            "ffn": {"kind": "swiglu", "hidden": 24},
            "block": {"kind": "pre_norm"},
            "layers": layers,
        }
    )


def per_layer_reference(model: zoo.model.build.ZooModel, ids: torch.Tensor) -> torch.Tensor:
    """The logits with a fresh positional module for every layer (nothing shared)."""
    spec = model.spec
    B, T = ids.shape
    pos = torch.arange(T)[None, :].expand(B, T)
    families = PartFamilies()
    own = [
        build_component(layer.positional, context(spec, layer, "decoder", families), families)
        for layer in spec.layer_specs()
    ]
    x = model.embed(ids, Positions(ids=pos, positional=own[0]))  # (B, T, d)
    for module, block in zip(own, model.layers):
        x = block(x, Positions(ids=pos, positional=module, rotation=module.rotation(pos)))
    return model.lm_head(model.final_norm(x))  # (B, T, vocab)


def test_rotations_that_differ_per_layer_equal_a_module_per_layer():
    model = zoo.build(tiny("rope-hybrid", {"kind": "rope"}, ROPE_LAYERS), seed=0).eval()
    # mamba (0 channels), 8, 16, partial 4 of 8, theta+scaling, interleaved; layer 6 = layer 1
    assert len(model.positionals) == 6
    assert model.layer_positional[6] == model.layer_positional[1]
    assert [model.positionals[i].rot_dim for i in model.layer_positional] == [0, 8, 16, 4, 8, 8, 8]
    ids = torch.randint(0, VOCAB, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), per_layer_reference(model, ids), atol=1e-6, rtol=1e-6)


def test_rotations_that_differ_per_layer_decode_as_the_full_forward():
    model = zoo.build(tiny("rope-hybrid", {"kind": "rope"}, ROPE_LAYERS), seed=0).eval()
    ids = torch.randint(0, VOCAB, (2, 8))
    with torch.no_grad():
        full = model(ids)
    cache = KVCache(model, batch_size=2, max_len=8)
    steps = [prefill(model, ids[:, :5], cache)] + [decode_step(model, ids[:, t : t + 1], cache) for t in range(5, 8)]
    torch.testing.assert_close(torch.stack(steps, dim=1), full[:, 4:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("first", [{"kind": "none"}, {"kind": "learned"}], ids=["first-none", "first-learned"])
def test_a_learned_table_in_a_hybrid_is_one_table_added_to_the_embeddings(first):
    """Layer 0 is recurrent (positions none, or the same learned spec): the attention layers'
    table is the stack's one table, built once and added to the token embeddings."""
    spec = tiny("learned-hybrid", {"kind": "learned"}, {"0": {"attention": MAMBA, "positional": first}}, n_layers=3)
    model = zoo.build(spec, seed=0).eval()
    tables = [name for name, _ in model.named_parameters() if name.startswith("positionals.")]
    assert len(tables) == 1
    table = model.positionals[model.input_positional].weight
    ids = torch.randint(0, VOCAB, (2, 6))
    seen = []
    model.layers[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with torch.no_grad():
        model(ids)
    torch.testing.assert_close(seen[0], model.embed.weight[ids] + table[:6])


def test_two_additive_positionals_in_one_stack_are_refused():
    spec = tiny("two-tables", {"kind": "learned"}, {"1": {"positional": {"kind": "sinusoidal"}}}, n_layers=2)
    with pytest.raises(SpecError, match=r"layers\.0 .*layers\.1"):
        zoo.build(spec, device="meta")


def test_relative_bias_tables_follow_each_layers_heads():
    positional = {"kind": "relative_buckets", "num_buckets": 8, "max_distance": 16}
    layers = {"1": {"attention": {**GQA, "n_heads": 2, "n_kv_heads": 2}}}  # same head_dim, fewer heads
    model = zoo.build(tiny("t5-like", positional, layers, n_layers=3), seed=0).eval()
    assert [model.positionals[i].weight.shape[1] for i in model.layer_positional] == [4, 2, 4]
    assert model.layer_positional[0] == model.layer_positional[2]  # one table per head count
    ids = torch.randint(0, VOCAB, (2, 6))
    with torch.no_grad():
        assert torch.isfinite(model(ids)).all()

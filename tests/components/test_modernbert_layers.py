"""ModernBERT's layer stack from zoo parts against transformers' ModernBertModel, same weights.

Bidirectional attention with a padded row, local layers that see |q - k| <= 4 (window 8)
with RoPE base 50, global layers every third (0, 3) with base 1000, GLU with exact GELU,
no attention norm on layer 0, bias-free LayerNorms. The embedding (and its norm) is
transformers' own here: the stack from the first layer to the final norm is compared.
"""

import pytest
import torch

import zoo
from tests.hub.encoder_checkpoints import make_hf_model, padded_batch

transformers = pytest.importorskip("transformers")

SPEC = {
    "vocab_size": 96,
    "d_model": 32,
    "n_layers": 4,
    "max_seq_len": 64,
    "tie_embeddings": True,
    "norm": {"kind": "layernorm", "eps": 1e-5, "bias": False},
    "positional": {"kind": "rope", "theta": 50.0},
    "attention": {"kind": "mha", "n_heads": 4, "bias": False, "causal": False, "window": 8},
    "ffn": {"kind": "gated", "hidden": 48, "activation": "gelu", "bias": False},
    "block": {"kind": "pre_norm"},
    "layers": {
        "0::3": {"attention": {"window": None}, "positional": {"theta": 1000.0}},
        "0": {"block": {"attn_norm": False}},
    },
}


def _copy_weights(model: torch.nn.Module, hf) -> None:  # type: ignore[no-untyped-def]
    with torch.no_grad():
        for i, (ours, theirs) in enumerate(zip(model.layers, hf.layers)):
            q, k, v = theirs.attn.Wqkv.weight.chunk(3, dim=0)
            ours.attention.q_proj.weight.copy_(q)
            ours.attention.k_proj.weight.copy_(k)
            ours.attention.v_proj.weight.copy_(v)
            ours.attention.o_proj.weight.copy_(theirs.attn.Wo.weight)
            gate, up = theirs.mlp.Wi.weight.chunk(2, dim=0)
            ours.ffn.gate_proj.weight.copy_(gate)
            ours.ffn.up_proj.weight.copy_(up)
            ours.ffn.down_proj.weight.copy_(theirs.mlp.Wo.weight)
            ours.ffn_norm.weight.copy_(theirs.mlp_norm.weight)
            if i:
                ours.attn_norm.weight.copy_(theirs.attn_norm.weight)
        model.final_norm.weight.copy_(hf.final_norm.weight)


def _zoo_stack(spec: dict, hf, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def,type-arg]
    """Final hidden states of the zoo layers on transformers' embedding output."""
    model = zoo.build(spec, seed=0).eval()
    _copy_weights(model, hf)
    T = ids.shape[1]
    with torch.no_grad():
        x = hf.embeddings(input_ids=ids)  # (B, T, d)
        shared = model.positions_for(torch.arange(T)[None].expand(ids.shape[0], T))
        for positions in shared:
            positions.key_valid = mask.bool()
        for i, block in enumerate(model.layers):
            x = block(x, shared[model.layer_positional[i]])
        return model.final_norm(x)


def test_layers_match_modernbert_with_padding() -> None:
    hf = make_hf_model("modernbert", "AutoModel")
    model = zoo.build(SPEC, seed=0)
    assert [type(block.attn_norm).__name__ for block in model.layers] == [
        "Identity",
        "LayerNorm",
        "LayerNorm",
        "LayerNorm",
    ]
    ids, mask = padded_batch(length=20)
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    got = _zoo_stack(SPEC, hf, ids, mask)
    assert (got[real] - expected[real]).abs().max().item() < 1e-4
    # 20 tokens cross the windows: all-global layers compute something else
    no_windows = _zoo_stack({**SPEC, "attention": {**SPEC["attention"], "window": None}}, hf, ids, mask)
    assert (no_windows[real] - expected[real]).abs().max().item() > 1e-3

"""The Hugging Face ``qwen3_next`` checkpoint family (transformers' Qwen3NextForCausalLM).

A hybrid: Gated DeltaNet layers (``linear_attention``) with a gated full-attention layer
(``full_attention``, every ``full_attention_interval``-th) and a MoE with a sigmoid-gated
shared expert in every layer. DeltaNet layers keep transformers' names under
``linear_attn``; the multi-token-prediction head (``mtp.*``) is unused by a causal LM, as
in transformers.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

import torch

from zoo.errors import CheckpointError
from zoo.hub.config_reader import (
    ConfigReader,
    layer_selector,
    rope_options,
    rope_params,
)
from zoo.hub.llama_like import LLAMA_RENAMES, expert_rules
from zoo.hub.names import Rule
from zoo.specs.model import ModelSpec

MODEL_TYPE = "qwen3_next"
ARCHITECTURE = "Qwen3NextForCausalLM"
IGNORED = re.compile(r"^mtp\..*$")
RENAMES: list[tuple[str, str]] = [
    (
        r"layers\.(\d+)\.attention\.(in_proj_qkvz|in_proj_ba|conv1d|out_proj|norm)\.weight",
        r"model.layers.\1.linear_attn.\2.weight",
    ),
    (r"layers\.(\d+)\.attention\.(dt_bias|A_log)", r"model.layers.\1.linear_attn.\2"),
    (
        r"layers\.(\d+)\.ffn\.shared\.(gate_proj|up_proj|down_proj)\.weight",
        r"model.layers.\1.mlp.shared_expert.\2.weight",
    ),
    (r"layers\.(\d+)\.ffn\.shared_gate\.weight", r"model.layers.\1.mlp.shared_expert_gate.weight"),
] + LLAMA_RENAMES


LAYER_TYPES = ("linear_attention", "full_attention")


def _qwen3_next_types(r: ConfigReader, n_layers: int) -> list[str]:
    """layer_types, or derived from full_attention_interval as transformers does."""
    interval = r.get("full_attention_interval", 4)
    types = r.get("layer_types")
    if types is None:
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layers)]
    if len(types) != n_layers or not set(types) <= set(LAYER_TYPES):
        raise r.error("layer_types", f"expected {n_layers} entries from {', '.join(LAYER_TYPES)}, got {types!r}")
    return list(types)


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a qwen3_next config.json."""
    d, n_layers, heads = r.need("hidden_size"), r.need("num_hidden_layers"), r.need("num_attention_heads")
    r.expect("hidden_act", (None, "silu"), "Qwen3-Next's MLPs and experts are SwiGLU")
    key, params = rope_params(r)
    types = _qwen3_next_types(r, n_layers)
    eps = r.get("rms_norm_eps", 1e-6)
    deltanet, attention = _deltanet(r, eps), _attention(r, d, heads)
    experts, step = r.get("num_experts", 0), r.get("decoder_sparse_step", 1)
    dense = set(r.get("mlp_only_layers", []))
    dense_layers = [i for i in range(n_layers) if i in dense or experts == 0 or (i + 1) % step != 0]
    moe = _moe(r) if experts else None
    swiglu = {"kind": "swiglu", "hidden": r.need("intermediate_size")} if dense_layers else None
    r.used.add("intermediate_size")  # no dense layer: unused, as in transformers
    r.expect("use_sliding_window", (None, False), "Qwen3-Next's attention has no window")
    mixers = {
        "linear_attention": {"attention": deltanet, "positional": {"kind": "none"}},
        "full_attention": {"attention": attention, "positional": rope_options(r, params, key)},
    }
    # the base is gated attention (so attention.kind swaps act on it), linear layers override it
    base = {**mixers["full_attention" if "full_attention" in types else "linear_attention"], "ffn": moe or swiglu}
    overrides = {}
    for i in range(n_layers):
        parts = {**mixers[types[i]], "ffn": swiglu if i in dense_layers else moe}
        if changed := {family: value for family, value in parts.items() if value != base[family]}:
            overrides[i] = changed
    layers = {}
    for value in {repr(v): v for v in overrides.values()}.values():
        layers[layer_selector([i for i, v in overrides.items() if v == value], n_layers)] = value
    return {
        "vocab_size": r.need("vocab_size"),
        "d_model": d,
        "n_layers": n_layers,
        "max_seq_len": r.need("max_position_embeddings"),
        "tie_embeddings": bool(r.get("tie_word_embeddings", False)),
        "norm": {"kind": "rmsnorm", "eps": eps, "unit_offset": True},
        **base,
        "block": {"kind": "pre_norm"},
        "layers": layers,
    }


def _deltanet(r: ConfigReader, eps: float) -> dict[str, Any]:
    """The Gated DeltaNet (linear attention) layers' mixer."""
    return {
        "kind": "gated_deltanet",
        "n_k_heads": r.need("linear_num_key_heads"),
        "n_v_heads": r.need("linear_num_value_heads"),
        "head_k_dim": r.need("linear_key_head_dim"),
        "head_v_dim": r.need("linear_value_head_dim"),
        "conv_kernel": r.get("linear_conv_kernel_dim", 4),
        "eps": eps,
    }


def _attention(r: ConfigReader, d: int, heads: int) -> dict[str, Any]:
    """The full-attention layers' gated attention."""
    return {
        "kind": "gqa",
        "n_heads": heads,
        "n_kv_heads": r.get("num_key_value_heads", heads),
        "head_dim": r.get("head_dim", d // heads),
        "bias": bool(r.get("attention_bias", False)),
        "qk_norm": True,
        "output_gate": True,
    }


def _moe(r: ConfigReader) -> dict[str, Any]:
    """The sparse layers' mixture of experts with its gated shared expert."""
    experts = r.get("num_experts", 0)
    return {
        "kind": "moe",
        "n_experts": experts,
        "top_k": r.need("num_experts_per_tok"),
        "hidden": r.need("moe_intermediate_size"),
        "routing": "softmax_topk",
        "renormalize": bool(r.get("norm_topk_prob", False)),
        "shared_hidden": r.need("shared_expert_intermediate_size"),
        "shared_gate": True,
    }


def _rope(positional: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"rope_type": "default", "rope_theta": positional.options.theta}
    if positional.options.partial_rotary_factor != 1.0:
        out["partial_rotary_factor"] = positional.options.partial_rotary_factor
    return out


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The qwen3_next config.json computing what ``spec`` computes."""
    layers = spec.layer_specs()
    kinds = {layer.attention.kind for layer in layers}
    if "gated_deltanet" not in kinds or len(kinds) != 2:
        raise CheckpointError(
            f"spec {spec.name!r}: a qwen3_next config needs Gated DeltaNet and attention layers, got {sorted(kinds)}"
        )
    full = next(layer for layer in layers if layer.attention.kind != "gated_deltanet")
    net = next(layer.attention.options for layer in layers if layer.attention.kind == "gated_deltanet")
    moe = next((layer.ffn.options for layer in layers if layer.ffn.kind == "moe"), None)
    dense = next((layer.ffn.options for layer in layers if layer.ffn.kind != "moe"), None)
    att = full.attention
    config: dict[str, Any] = {
        "model_type": "qwen3_next",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.d_model,
        "num_hidden_layers": spec.n_layers,
        "max_position_embeddings": spec.max_seq_len,
        "tie_word_embeddings": spec.tie_embeddings,
        "rms_norm_eps": layers[0].norm.options.eps,
        "hidden_act": "silu",
        "num_attention_heads": att.options.n_heads,
        "num_key_value_heads": att.options.kv_heads,
        "head_dim": att.options.head_dim,
        "attention_bias": att.options.bias,
        "rope_parameters": _rope(full.positional),
        "linear_num_key_heads": net.n_k_heads,
        "linear_num_value_heads": net.n_v_heads,
        "linear_key_head_dim": net.head_k_dim,
        "linear_value_head_dim": net.head_v_dim,
        "linear_conv_kernel_dim": net.conv_kernel,
        "layer_types": [
            "linear_attention" if layer.attention.kind == "gated_deltanet" else "full_attention" for layer in layers
        ],
        "num_experts": 0 if moe is None else moe.n_experts,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [layer.index for layer in layers if layer.ffn.kind != "moe"] if moe is not None else [],
    }
    if moe is not None:
        config.update(
            num_experts_per_tok=moe.top_k,
            moe_intermediate_size=moe.hidden,
            norm_topk_prob=moe.renormalize,
            shared_expert_intermediate_size=moe.shared_hidden,
        )
    if dense is not None:
        config["intermediate_size"] = dense.hidden
    return config


def tensor_rules(
    zoo_shapes: Mapping[str, torch.Size], hf_keys: Collection[str]
) -> tuple[list[Rule], list[tuple[str, str]]]:
    """Routed experts as Qwen3-MoE's; DeltaNet layers and the shared expert renamed."""
    return expert_rules(zoo_shapes, hf_keys, "mlp", "gate", ("gate_proj", "up_proj", "down_proj")), RENAMES

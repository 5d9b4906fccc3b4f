"""Hugging Face config.json <-> ModelSpec for the recurrent families: qwen3_next and mamba2.

Qwen3-Next is a hybrid: Gated DeltaNet layers (``linear_attention``) with a gated
full-attention layer (``full_attention``, every ``full_attention_interval``-th) and a MoE
with a sigmoid-gated shared expert in every layer. Mamba2 is a stack of Mamba2 mixers
alone (no FFN). Reading and writing live side by side so each mapping is checked against
its inverse (``save_pretrained`` re-reads what it writes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zoo.errors import CheckpointError
from zoo.hub.config_reader import ConfigReader, layer_selector, rope_options, rope_params

if TYPE_CHECKING:  # annotations only: the hub reads specs, the spec never imports the hub
    from zoo.specs.model import ModelSpec

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


def _qwen3_next(r: ConfigReader) -> dict[str, Any]:
    d, n_layers, heads = r.need("hidden_size"), r.need("num_hidden_layers"), r.need("num_attention_heads")
    r.expect("hidden_act", (None, "silu"), "Qwen3-Next's MLPs and experts are SwiGLU")
    key, params = rope_params(r)
    types = _qwen3_next_types(r, n_layers)
    eps = r.get("rms_norm_eps", 1e-6)
    deltanet = {
        "kind": "gated_deltanet", "n_k_heads": r.need("linear_num_key_heads"), "n_v_heads": r.need("linear_num_value_heads"),
        "head_k_dim": r.need("linear_key_head_dim"), "head_v_dim": r.need("linear_value_head_dim"),
        "conv_kernel": r.get("linear_conv_kernel_dim", 4), "eps": eps,
    }
    attention = {
        "kind": "gqa", "n_heads": heads, "n_kv_heads": r.get("num_key_value_heads", heads), "head_dim": r.get("head_dim", d // heads),
        "bias": bool(r.get("attention_bias", False)), "qk_norm": True, "output_gate": True,
    }
    experts, step = r.get("num_experts", 0), r.get("decoder_sparse_step", 1)
    dense = set(r.get("mlp_only_layers", []))
    dense_layers = [i for i in range(n_layers) if i in dense or experts == 0 or (i + 1) % step != 0]
    moe = None if experts == 0 else {
        "kind": "moe", "n_experts": experts, "top_k": r.need("num_experts_per_tok"), "hidden": r.need("moe_intermediate_size"),
        "routing": "softmax_topk", "renormalize": bool(r.get("norm_topk_prob", False)),
        "shared_hidden": r.need("shared_expert_intermediate_size"), "shared_gate": True,
    }
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
        "vocab_size": r.need("vocab_size"), "d_model": d, "n_layers": n_layers,
        "max_seq_len": r.need("max_position_embeddings"), "tie_embeddings": bool(r.get("tie_word_embeddings", False)),
        "norm": {"kind": "rmsnorm", "eps": eps, "unit_offset": True},
        **base,
        "block": {"kind": "pre_norm"},
        "layers": layers,
    }


def _json_float(value: Any) -> float:
    """A number, or transformers 5's encoding of a non-finite one: {"__float__": "Infinity"}."""
    return float(value["__float__"]) if isinstance(value, dict) and "__float__" in value else float(value)


def _mamba2(r: ConfigReader) -> dict[str, Any]:
    d, heads, head_dim = r.need("hidden_size"), r.need("num_heads"), r.get("head_dim", 64)
    r.expect("hidden_act", (None, "silu"), "the Mamba2 convolution and gate are SiLU")
    r.expect("rms_norm", (None, True), "Mamba2 blocks use RMSNorm")
    r.expect("norm_before_gate", (None, False), "transformers' Mamba2 gates before its norm")
    inner = int(r.get("expand", 2) * d)
    if heads * head_dim != inner:
        raise r.error("num_heads", f"num_heads * head_dim = {heads * head_dim} must equal expand * hidden_size = {inner}")
    # init-only or informational: time_step_rank/min/max/floor, rescale_prenorm_residual;
    # residual_in_fp32 keeps the residual stream in float32 (no effect on a float32 model)
    r.used.update({"time_step_rank", "time_step_min", "time_step_max", "time_step_floor", "rescale_prenorm_residual",
                   "residual_in_fp32", "layer_types"})
    low, high = (_json_float(v) for v in r.get("time_step_limit", (0.0, math.inf)))  # dt is clamped to this range
    eps = r.get("layer_norm_epsilon", 1e-5)
    mixer = {
        "kind": "mamba2", "n_heads": heads, "head_dim": head_dim, "n_groups": r.get("n_groups", 1),
        "state_size": r.get("state_size", 128), "conv_kernel": r.get("conv_kernel", 4), "chunk_size": r.get("chunk_size", 256),
        "bias": bool(r.get("use_bias", False)), "conv_bias": bool(r.get("use_conv_bias", True)), "eps": eps,
        "dt_min": float(low), "dt_max": None if math.isinf(high) else float(high),
    }
    return {
        "vocab_size": r.need("vocab_size"), "d_model": d, "n_layers": r.need("num_hidden_layers"),
        "max_seq_len": r.get("max_position_embeddings", 1048576),
        "tie_embeddings": bool(r.get("tie_word_embeddings", False)),
        "norm": {"kind": "rmsnorm", "eps": eps},
        "positional": {"kind": "none"},
        "attention": mixer,
        "ffn": {"kind": "none"},
        "block": {"kind": "pre_norm"},
    }


RECURRENT_FAMILIES: dict[str, Callable[[ConfigReader], dict[str, Any]]] = {
    "qwen3_next": _qwen3_next,
    "mamba2": _mamba2,
}
RECURRENT_ARCHITECTURES = {"qwen3_next": "Qwen3NextForCausalLM", "mamba2": "Mamba2ForCausalLM"}


def _rope(positional: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"rope_type": "default", "rope_theta": positional.options.theta}
    if positional.options.partial_rotary_factor != 1.0:
        out["partial_rotary_factor"] = positional.options.partial_rotary_factor
    return out


def _qwen3_next_config(spec: ModelSpec) -> dict[str, Any]:
    layers = spec.layer_specs()
    kinds = {layer.attention.kind for layer in layers}
    if "gated_deltanet" not in kinds or len(kinds) != 2:
        raise CheckpointError(f"spec {spec.name!r}: a qwen3_next config needs Gated DeltaNet and attention layers, got {sorted(kinds)}")
    full = next(layer for layer in layers if layer.attention.kind != "gated_deltanet")
    net = next(layer.attention for layer in layers if layer.attention.kind == "gated_deltanet")
    moe = next((layer.ffn for layer in layers if layer.ffn.kind == "moe"), None)
    dense = next((layer.ffn for layer in layers if layer.ffn.kind != "moe"), None)
    att = full.attention
    config: dict[str, Any] = {
        "model_type": "qwen3_next", "vocab_size": spec.vocab_size, "hidden_size": spec.d_model,
        "num_hidden_layers": spec.n_layers, "max_position_embeddings": spec.max_seq_len,
        "tie_word_embeddings": spec.tie_embeddings, "rms_norm_eps": layers[0].norm.options.eps, "hidden_act": "silu",
        "num_attention_heads": att.options.n_heads, "num_key_value_heads": att.options.kv_heads, "head_dim": att.options.head_dim,
        "attention_bias": att.options.bias, "rope_parameters": _rope(full.positional),
        "linear_num_key_heads": net.options.n_k_heads, "linear_num_value_heads": net.options.n_v_heads,
        "linear_key_head_dim": net.options.head_k_dim, "linear_value_head_dim": net.options.head_v_dim, "linear_conv_kernel_dim": net.options.conv_kernel,
        "layer_types": ["linear_attention" if layer.attention.kind == "gated_deltanet" else "full_attention" for layer in layers],
        "num_experts": 0 if moe is None else moe.options.n_experts, "decoder_sparse_step": 1,
        "mlp_only_layers": [layer.index for layer in layers if layer.ffn.kind != "moe"] if moe is not None else [],
    }
    if moe is not None:
        config.update(num_experts_per_tok=moe.options.top_k, moe_intermediate_size=moe.options.hidden, norm_topk_prob=moe.options.renormalize,
                      shared_expert_intermediate_size=moe.options.shared_hidden)
    if dense is not None:
        config["intermediate_size"] = dense.options.hidden
    return config


def _ratio(a: int, b: int) -> int | float:
    return a // b if a % b == 0 else a / b


def _mamba2_config(spec: ModelSpec) -> dict[str, Any]:
    layer = spec.layer(0)
    mixer = layer.attention
    if any(other.attention.to_dict() != mixer.to_dict() for other in spec.layer_specs()) or mixer.kind != "mamba2":
        raise CheckpointError(f"spec {spec.name!r}: a mamba2 config needs the same mamba2 mixer in every layer")
    config: dict[str, Any] = {
        "model_type": "mamba2", "vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "num_hidden_layers": spec.n_layers,
        "max_position_embeddings": spec.max_seq_len, "tie_word_embeddings": spec.tie_embeddings,
        "num_heads": mixer.options.n_heads, "head_dim": mixer.options.head_dim, "expand": _ratio(mixer.options.n_heads * mixer.options.head_dim, spec.d_model),
        "n_groups": mixer.options.n_groups, "state_size": mixer.options.state_size, "conv_kernel": mixer.options.conv_kernel,
        "chunk_size": mixer.options.chunk_size, "use_bias": mixer.options.bias, "use_conv_bias": mixer.options.conv_bias,
        "layer_norm_epsilon": layer.norm.options.eps, "hidden_act": "silu",
    }
    if mixer.options.dt_min or mixer.options.dt_max is not None:  # (0, inf) is the default; inf as transformers 5 writes it
        config["time_step_limit"] = [mixer.options.dt_min, {"__float__": "Infinity"} if mixer.options.dt_max is None else mixer.options.dt_max]
    return config


RECURRENT_WRITERS: dict[str, Callable[[ModelSpec], dict[str, Any]]] = {
    "qwen3_next": _qwen3_next_config,
    "mamba2": _mamba2_config,
}

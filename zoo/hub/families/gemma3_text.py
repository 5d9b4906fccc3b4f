"""The Hugging Face ``gemma3_text`` checkpoint family (transformers' Gemma3ForCausalLM).

Sandwich blocks (a norm after attention and after the FFN too), RMS norms with a unit
offset, GeGLU, embeddings scaled by sqrt(d_model), query-key norms, queries scaled by
``query_pre_attn_scalar``; local layers with a window and their own RoPE base, a global
layer every ``sliding_window_pattern``-th. transformers 4 names the local base
``rope_local_base_freq``; transformers 5 writes ``rope_parameters`` per layer type.
"""

from __future__ import annotations

import re
from typing import Any

from zoo.hub.config_reader import (
    ConfigReader,
    layer_selector,
    rope_options,
    rope_params,
)
from zoo.hub.config_writer import require
from zoo.hub.llama_like import (
    ATTENTION_KINDS,
    LLAMA_RENAMES,
    no_rules,
    rope_config,
    window_layers,
    windows,
)
from zoo.specs.model import ModelSpec

MODEL_TYPE = "gemma3_text"
ARCHITECTURE = "Gemma3ForCausalLM"
IGNORED = re.compile("$^")
RENAMES: list[tuple[str, str]] = [
    (r"layers\.(\d+)\.ffn_norm\.weight", r"model.layers.\1.pre_feedforward_layernorm.weight"),
    (r"layers\.(\d+)\.post_attn_norm\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
    (r"layers\.(\d+)\.post_ffn_norm\.weight", r"model.layers.\1.post_feedforward_layernorm.weight"),
] + LLAMA_RENAMES


def _ropes(r: ConfigReader) -> tuple[dict[str, Any], dict[str, Any]]:
    """(global, local) positional options."""
    key, params = rope_params(r)
    params = dict(params or {})
    r.used.add("rope_local_base_freq")
    if "full_attention" in params or "sliding_attention" in params:  # transformers 5: one dict per layer type
        return (
            rope_options(r, params.get("full_attention"), f"{key}.full_attention"),
            rope_options(r, params.get("sliding_attention"), f"{key}.sliding_attention"),
        )
    # transformers 4: rope_theta + rope_scaling for global layers, rope_local_base_freq for local
    return rope_options(r, params, key), {"kind": "rope", "theta": float(r.get("rope_local_base_freq", 10000.0))}


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a gemma3_text config.json."""
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        r.expect(key, (None,), "logit soft-capping is not implemented in zoo")
    r.expect("use_bidirectional_attention", (None, False), "zoo models are causal")
    d, heads, n_layers = r.need("hidden_size"), r.need("num_attention_heads"), r.need("num_hidden_layers")
    kv = r.get("num_key_value_heads", heads)
    head_dim = r.get("head_dim", d // heads)
    global_rope, local_rope = _ropes(r)
    window = r.need("sliding_window")
    if r.config.get("layer_types") is None:
        pattern = r.config.get("sliding_window_pattern") or r.config.get("_sliding_window_pattern") or 6
        r.config["layer_types"] = [
            "full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n_layers)
        ]
    sliding = window_layers(r, n_layers, window, default_sliding=False)
    full = [i for i in range(n_layers) if i not in sliding]
    attention = {
        "kind": "mqa" if kv == 1 else "gqa",
        "n_heads": heads,
        "n_kv_heads": kv,
        "head_dim": head_dim,
        "qk_norm": True,
        "bias": bool(r.get("attention_bias", False)),
        "scale": float(r.get("query_pre_attn_scalar", head_dim)) ** -0.5,
        "window": window,
    }
    layers: dict[str, Any] = {}
    if full:
        layers[layer_selector(full, n_layers)] = {"attention": {"window": None}, "positional": global_rope}
    activation = r.activation("hidden_activation", "gelu_pytorch_tanh")
    hidden = r.need("intermediate_size")
    return {
        "vocab_size": r.need("vocab_size"),
        "d_model": d,
        "n_layers": n_layers,
        "max_seq_len": r.need("max_position_embeddings"),
        "tie_embeddings": bool(r.get("tie_word_embeddings", True)),
        "embedding_scale": "sqrt_d_model",
        "norm": {"kind": "rmsnorm", "eps": r.get("rms_norm_eps", 1e-6), "unit_offset": True},
        "positional": local_rope if sliding else global_rope,
        "attention": attention if sliding else {**attention, "window": None},
        "ffn": {"kind": "geglu", "hidden": hidden}
        if activation == "gelu_tanh"
        else {"kind": "gated", "hidden": hidden, "activation": activation},
        "block": {"kind": "sandwich"},
        "layers": layers if sliding else {},
    }


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The gemma3_text config.json computing what ``spec`` computes."""
    require(
        spec,
        MODEL_TYPE,
        attention=ATTENTION_KINDS,
        norm=("rmsnorm",),
        positional=("rope",),
        ffn=("geglu", "gated"),
        block=("sandwich",),
    )
    layers = spec.layer_specs()
    base = layers[0]
    att = base.attention
    types, window = windows(spec)
    full = next((layer for layer in layers if not layer.attention.options.window), base)
    local = next((layer for layer in layers if layer.attention.options.window), base)
    scalar = (att.options.scale or att.options.head_dim**-0.5) ** -2
    return {
        "model_type": MODEL_TYPE,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.d_model,
        "num_hidden_layers": spec.n_layers,
        "num_attention_heads": att.options.n_heads,
        "num_key_value_heads": att.options.kv_heads,
        "head_dim": att.options.head_dim,
        "max_position_embeddings": spec.max_seq_len,
        "rms_norm_eps": base.norm.options.eps,
        "tie_word_embeddings": spec.tie_embeddings,
        "attention_bias": att.options.bias,
        "layer_types": types,
        "intermediate_size": base.ffn.options.hidden,
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": round(scalar)
        if abs(scalar - round(scalar)) < 1e-6 * max(1.0, abs(scalar))
        else scalar,
        "rope_parameters": {
            "full_attention": rope_config(full.positional),
            "sliding_attention": rope_config(local.positional),
        },
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
        "sliding_window": window or spec.max_seq_len,
    }


tensor_rules = no_rules(RENAMES)

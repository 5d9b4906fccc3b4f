"""What the llama-like checkpoint families share: config.json both ways and tensor names.

Llama, Mistral, Mixtral, Qwen2/3, Qwen3-MoE, gpt-oss, Gemma 3, Phi-3 and Qwen3-Next are
pre-norm decoders with RMSNorm, RoPE and a gated FFN (or experts) under transformers'
``model.layers.N.{self_attn, mlp, input_layernorm, post_attention_layernorm}`` names. Each
family module (``zoo.hub.families.<model_type>``) states what its own differs in, calling
these helpers; nothing here asks which family it serves.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import torch

from zoo.errors import CheckpointError, allowed
from zoo.hub.config_reader import (
    ACTIVATIONS,
    ConfigReader,
    layer_selector,
    rope_options,
    rope_params,
)
from zoo.hub.config_writer import require
from zoo.hub.names import Rule, fused_gate_up, rename, stacked_experts
from zoo.specs.model import ModelSpec

LLAMA_RENAMES: list[tuple[str, str]] = [
    (r"embed\.weight", "model.embed_tokens.weight"),
    (r"final_norm\.weight", "model.norm.weight"),
    (r"lm_head\.weight", "lm_head.weight"),
    (r"layers\.(\d+)\.attn_norm\.weight", r"model.layers.\1.input_layernorm.weight"),
    (r"layers\.(\d+)\.ffn_norm\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
    (r"layers\.(\d+)\.attention\.(\w+)\.(weight|bias)", r"model.layers.\1.self_attn.\2.\3"),
    (r"layers\.(\d+)\.attention\.sinks", r"model.layers.\1.self_attn.sinks"),
    (r"layers\.(\d+)\.ffn\.(gate_proj|up_proj|down_proj)\.(weight|bias)", r"model.layers.\1.mlp.\2.\3"),
]
# the rope_parameters keys transformers reads for each scaling type (others it warns about)
SCALING_KEYS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": (
        "factor",
        "original_max_position_embeddings",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "attention_factor",
        "truncate",
    ),
}
ATTENTION_KINDS = ("gqa", "mha", "mqa")


# ---- config.json -> spec --------------------------------------------------------------------
def window_layers(reader: ConfigReader, n_layers: int, window: int | None, default_sliding: bool) -> list[int]:
    """Indices of sliding-window layers from layer_types (or all/none when absent)."""
    types = reader.get("layer_types")
    if types is None:
        return list(range(n_layers)) if (default_sliding and window) else []
    allowed_types = {"full_attention", "sliding_attention"}
    if len(types) != n_layers or not set(types) <= allowed_types:
        raise reader.error("layer_types", f"expected {n_layers} entries from {allowed(allowed_types)}, got {types!r}")
    sliding = [i for i, t in enumerate(types) if t == "sliding_attention"]
    if sliding and not window:
        raise reader.error("sliding_window", "required by the sliding_attention layers in layer_types")
    return sliding


def read_llama_like(r: ConfigReader, *, qk_norm: bool = False, sliding_key: str | None = None) -> dict[str, Any]:
    """The spec dict of a llama-shaped config; ``sliding_key`` names the switch that enables
    ``sliding_window`` (Qwen's ``use_sliding_window``), None when the window alone does."""
    d, heads = r.need("hidden_size"), r.need("num_attention_heads")
    n_layers = r.need("num_hidden_layers")
    key, params = rope_params(r)
    bias = bool(r.get("attention_bias", False))
    attention: dict[str, Any] = {
        "kind": "gqa",
        "n_heads": heads,
        "n_kv_heads": r.get("num_key_value_heads", heads),
        "head_dim": r.get("head_dim", d // heads),
        "bias": bias,
        "qk_norm": qk_norm,
    }
    spec: dict[str, Any] = {
        "vocab_size": r.need("vocab_size"),
        "d_model": d,
        "n_layers": n_layers,
        "max_seq_len": r.need("max_position_embeddings"),
        "tie_embeddings": bool(r.get("tie_word_embeddings", False)),
        "norm": {"kind": "rmsnorm", "eps": r.get("rms_norm_eps", 1e-6)},
        "positional": rope_options(r, params, key),
        "attention": attention,
        "ffn": {"kind": "swiglu", "hidden": r.get("intermediate_size"), "bias": bool(r.get("mlp_bias", False))},
        "block": {"kind": "pre_norm"},
        "layers": {},
    }
    if r.activation("hidden_act", "silu") != "silu":
        spec["ffn"] = {
            "kind": "gated",
            "hidden": spec["ffn"]["hidden"],
            "activation": ACTIVATIONS[r.config["hidden_act"]],
            "bias": spec["ffn"]["bias"],
        }
    window = r.get("sliding_window")
    enabled = bool(r.get(sliding_key, False)) if sliding_key else True
    if r.config.get("layer_types") is not None and not any(t == "sliding_attention" for t in r.config["layer_types"]):
        window = None  # every layer full: sliding_window, if set, is unused
    sliding = window_layers(r, n_layers, window, default_sliding=enabled)
    if sliding and len(sliding) == n_layers:
        attention["window"] = window
    elif sliding:
        spec["layers"][layer_selector(sliding, n_layers)] = {"attention": {"window": window}}
    return spec


def experts(r: ConfigReader, spec: dict[str, Any], *, n_experts: int, hidden_key: str, renormalize: bool) -> None:
    """Replace the FFN by softmax-top-k experts."""
    spec["ffn"] = {
        "kind": "moe",
        "n_experts": n_experts,
        "top_k": r.need("num_experts_per_tok"),
        "hidden": r.need(hidden_key),
        "routing": "softmax_topk",
        "renormalize": renormalize,
    }


# ---- spec -> config.json --------------------------------------------------------------------
def rope_config(positional: Any) -> dict[str, Any]:
    """transformers 5's rope_parameters for a rope component."""
    out: dict[str, Any] = {"rope_type": "default", "rope_theta": positional.options.theta}
    if positional.options.scaling is not None:
        scaling = positional.options.scaling.model_dump(exclude_none=True)
        kind = scaling.pop("type")
        out.update(rope_type=kind, **{k: v for k, v in scaling.items() if k in SCALING_KEYS[kind]})
    if positional.options.partial_rotary_factor != 1.0:
        out["partial_rotary_factor"] = positional.options.partial_rotary_factor
    return out


def windows(spec: ModelSpec) -> tuple[list[str], int | None]:
    """(layer_types, the one sliding_window or None)."""
    sizes = {layer.attention.options.window for layer in spec.layer_specs() if layer.attention.options.window}
    if len(sizes) > 1:
        raise CheckpointError(
            f"layers: windows {sorted(sizes)} differ between layers; HF configs hold one sliding_window"
        )
    types = [
        "sliding_attention" if layer.attention.options.window else "full_attention" for layer in spec.layer_specs()
    ]
    return types, (sizes.pop() if sizes else None)


def write_llama_like(spec: ModelSpec, model_type: str, ffn_kinds: Collection[str] = ("swiglu",)) -> dict[str, Any]:
    """The config keys every llama-like family writes (the family adds its own)."""
    require(
        spec,
        model_type,
        attention=ATTENTION_KINDS,
        norm=("rmsnorm",),
        positional=("rope",),
        ffn=ffn_kinds,
        block=("pre_norm",),
    )
    base = spec.layer(0)
    att, norm = base.attention, base.norm
    _, window = windows(spec)
    config: dict[str, Any] = {
        "model_type": model_type,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.d_model,
        "num_hidden_layers": spec.n_layers,
        "num_attention_heads": att.options.n_heads,
        "num_key_value_heads": att.options.kv_heads,
        "head_dim": att.options.head_dim,
        "max_position_embeddings": spec.max_seq_len,
        "rms_norm_eps": norm.options.eps,
        "tie_word_embeddings": spec.tie_embeddings,
        "rope_parameters": rope_config(base.positional),
        "hidden_act": "silu",
        "sliding_window": window,
    }
    dense = next((layer.ffn.options for layer in spec.layer_specs() if layer.ffn.kind != "moe"), None)
    if dense is not None:
        config["intermediate_size"] = dense.hidden
    return config


def moe_ffn(spec: ModelSpec) -> Any | None:
    """The options of the first MoE layer's experts, None when no layer has experts."""
    return next((layer.ffn.options for layer in spec.layer_specs() if layer.ffn.kind == "moe"), None)


# ---- tensor names ---------------------------------------------------------------------------
def layers_with(zoo_names: Iterable[str], suffix: str) -> list[str]:
    """Layer indices (as strings, in order) holding a parameter ``layers.N.<suffix>``."""
    return sorted({m.group(1) for n in zoo_names if (m := re.fullmatch(rf"layers\.(\d+)\.{suffix}", n))}, key=int)


def expert_rules(
    zoo_shapes: Mapping[str, torch.Size],
    hf_keys: Collection[str],
    moe_prefix: str,
    router: str,
    per_expert: tuple[str, str, str],
) -> list[Rule]:
    """MoE layers: the hub's per-expert tensors, or transformers 5's fused 3-D ones."""
    rules = []
    for i in layers_with(zoo_shapes, r"ffn\.w_up"):
        z = f"layers.{i}.ffn"
        h = f"model.layers.{i}.{moe_prefix}"
        if f"model.layers.{i}.mlp.experts.gate_up_proj" in hf_keys:  # fused layout, always under mlp.
            h = f"model.layers.{i}.mlp"
            rules.append(fused_gate_up((f"{z}.w_gate", f"{z}.w_up"), f"{h}.experts.gate_up_proj"))
            rules.append(rename(f"{z}.w_down", f"{h}.experts.down_proj"))
        else:
            n = int(zoo_shapes[f"{z}.w_up"][0])
            for zoo_name, hf_name in zip(("w_gate", "w_up", "w_down"), per_expert):
                rules.append(
                    stacked_experts(f"{z}.{zoo_name}", [f"{h}.experts.{e}.{hf_name}.weight" for e in range(n)])
                )
        rules.append(rename(f"{z}.router.weight", f"{h}.{router}.weight"))
    return rules


def no_rules(renames: list[tuple[str, str]]) -> Callable[..., tuple[list[Rule], list[tuple[str, str]]]]:
    """``tensor_rules`` of a family whose tensors are renamed only."""

    def tensor_rules(zoo_names: Collection[str], hf_keys: Collection[str]) -> tuple[list[Rule], list[tuple[str, str]]]:
        return [], list(renames)

    return tensor_rules

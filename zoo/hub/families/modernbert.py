"""ModernBERT checkpoints: config.json <-> ModelSpec and tensor names.

ModernBERT (answerdotai/ModernBERT-base) is a pre-norm bidirectional encoder without
biases: an embedding LayerNorm, RoPE, a fused ``Wqkv``, a GLU FFN with exact GELU whose
fused ``Wi`` holds [activated half; gate half], no attention norm on layer 0, local layers
that see |q - k| <= local_attention / 2 and a global layer every third (layers 0, 3, 6,
...) with its own RoPE base. ``ModernBertForMaskedLM`` adds a head (dense, GELU,
LayerNorm, then the tied decoder with a bias); ``ModernBertModel`` returns hidden states.

transformers 4 configs name the bases ``global_rope_theta`` / ``local_rope_theta`` and the
pattern ``global_attn_every_n_layers``; transformers 5 writes ``rope_parameters`` per
layer type and ``layer_types``. Both are read; version 5's form is written.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from zoo.errors import CheckpointError
from zoo.hub.config_reader import ConfigReader, layer_selector, rope_options
from zoo.hub.config_writer import require
from zoo.hub.names import Rule, split_rows
from zoo.specs.model import ModelSpec

MODEL_TYPE = "modernbert"
ARCHITECTURE = "ModernBertModel"  # the bare encoder; with a masked-LM head the config names ModernBertForMaskedLM
ARCHITECTURES = {"masked_lm": "ModernBertForMaskedLM", "none": "ModernBertModel"}
# keys transformers' ModernBERT reads for training or tokenization only, or never reads
NEUTRAL = (
    "cls_token_id",
    "sep_token_id",
    "initializer_cutoff_factor",
    "embedding_dropout",
    "mlp_dropout",
    "classifier_pooling",
    "classifier_dropout",
    "deterministic_flash_attn",
    "sparse_prediction",
    "sparse_pred_ignore_index",
    "reference_compile",
    "repad_logits_with_grad",
    "gradient_checkpointing",
    "layer_norm_eps",
    "position_embedding_type",
    "is_encoder_decoder",
    "head_dim",
)


def _layer_types(r: ConfigReader, n_layers: int) -> list[str]:
    types = r.get("layer_types")
    every = int(r.get("global_attn_every_n_layers", 3))
    if types is None:
        return ["sliding_attention" if i % every else "full_attention" for i in range(n_layers)]
    allowed = {"full_attention", "sliding_attention"}
    if len(types) != n_layers or not set(types) <= allowed:
        raise r.error(
            "layer_types", f"expected {n_layers} entries from full_attention, sliding_attention; got {types!r}"
        )
    return list(types)


def _ropes(r: ConfigReader) -> tuple[dict[str, Any], dict[str, Any]]:
    """(global, local) positional options."""
    params = r.get("rope_parameters")
    r.used.add("rope_scaling")
    if r.config.get("rope_scaling") is not None:
        raise r.error("rope_scaling", "RoPE scaling is not supported for modernbert")
    if isinstance(params, dict) and ("full_attention" in params or "sliding_attention" in params):
        full = rope_options(
            r, params.get("full_attention") or {"rope_theta": 160000.0}, "rope_parameters.full_attention"
        )
        local = rope_options(
            r, params.get("sliding_attention") or {"rope_theta": 10000.0}, "rope_parameters.sliding_attention"
        )
        return full, local
    return (
        {"kind": "rope", "theta": float(r.get("global_rope_theta", 160000.0))},
        {"kind": "rope", "theta": float(r.get("local_rope_theta", 10000.0))},
    )


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a modernbert config.json."""
    r.used.update(NEUTRAL)
    d, heads, n_layers = r.need("hidden_size"), r.need("num_attention_heads"), r.need("num_hidden_layers")
    full_rope, local_rope = _ropes(r)
    types = _layer_types(r, n_layers)
    window = int(r.get("local_attention", 128))
    norm = {"kind": "layernorm", "eps": float(r.get("norm_eps", 1e-5)), "bias": bool(r.get("norm_bias", False))}
    architectures = r.get("architectures") or []
    masked = any(str(a).endswith("ForMaskedLM") for a in architectures)
    head: dict[str, Any] = {"kind": "none"}
    if masked:
        head = {
            "kind": "masked_lm",
            "activation": r.activation("classifier_activation", "gelu"),
            "transform_bias": bool(r.get("classifier_bias", False)),
        }
        r.expect("decoder_bias", (None, True), "the masked-LM decoder has a bias")
    r.used.update({"classifier_activation", "classifier_bias", "decoder_bias"})
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    local = [i for i, t in enumerate(types) if t == "sliding_attention"]
    base_local = bool(local)
    layers: dict[str, Any] = {}
    if base_local and full:
        layers[layer_selector(full, n_layers)] = {"attention": {"window": None}, "positional": full_rope}
    layers["0"] = {"block": {"attn_norm": False}}
    return {
        "vocab_size": r.need("vocab_size"),
        "d_model": d,
        "n_layers": n_layers,
        "max_seq_len": r.need("max_position_embeddings"),
        "tie_embeddings": bool(r.get("tie_word_embeddings", True)),
        "embedding": {"kind": "token", "norm": True},
        "norm": norm,
        "positional": local_rope if base_local else full_rope,
        "attention": {
            "kind": "mha",
            "n_heads": heads,
            "head_dim": d // heads,
            "bias": bool(r.get("attention_bias", False)),
            "causal": False,
            "window": window if base_local else None,
        },
        "ffn": {
            "kind": "gated",
            "hidden": r.need("intermediate_size"),
            "activation": r.activation("hidden_activation", "gelu"),
            "bias": bool(r.get("mlp_bias", False)),
        },
        "block": {"kind": "pre_norm"},
        "final_norm": True,
        "head": head,
        "layers": layers,
    }


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The modernbert config.json computing what ``spec`` computes (checked by reading it back)."""
    head = spec.part("head")
    if spec.encoder is not None or head.kind not in ARCHITECTURES:
        raise CheckpointError(
            f"spec {spec.name!r}: a modernbert config describes an encoder with head none or masked_lm"
        )
    require(
        spec, MODEL_TYPE, attention=("mha", "gqa", "mqa"), norm=("layernorm",), positional=("rope",), ffn=("gated",)
    )
    layers = spec.layer_specs()
    base = layers[0]
    att, ffn, norm = base.attention, base.ffn, base.norm
    windows = {layer.attention.options.window for layer in layers if layer.attention.options.window}
    full = next((layer for layer in layers if not layer.attention.options.window), base)
    local = next((layer for layer in layers if layer.attention.options.window), base)
    config: dict[str, Any] = {
        "model_type": MODEL_TYPE,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.d_model,
        "num_hidden_layers": spec.n_layers,
        "num_attention_heads": att.options.n_heads,
        "intermediate_size": ffn.options.hidden,
        "hidden_activation": ffn.options.activation,
        "max_position_embeddings": spec.max_seq_len,
        "norm_eps": norm.options.eps,
        "norm_bias": norm.options.bias,
        "attention_bias": att.options.bias,
        "mlp_bias": ffn.options.bias,
        "layer_types": [
            "sliding_attention" if layer.attention.options.window else "full_attention" for layer in layers
        ],
        "local_attention": windows.pop() if len(windows) == 1 else 128,
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": full.positional.options.theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": local.positional.options.theta},
        },
        "tie_word_embeddings": spec.tie_embeddings,
        # token ids are the tokenizer's, not the spec's: transformers' defaults (50283, ...)
        # would not even fit a smaller vocabulary
        **dict.fromkeys(("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id")),
    }
    if head.kind == "masked_lm":
        config.update(
            classifier_activation=head.options.activation,
            classifier_bias=head.options.transform_bias,
            decoder_bias=True,
        )
    return {"architectures": [ARCHITECTURES[head.kind]], **config}


RENAMES: list[tuple[str, str]] = [
    (r"embed\.weight", "{p}embeddings.tok_embeddings.weight"),
    (r"embed\.norm\.(weight|bias)", r"{p}embeddings.norm.\1"),
    (r"final_norm\.(weight|bias)", r"{p}final_norm.\1"),
    (r"layers\.(\d+)\.attn_norm\.(weight|bias)", r"{p}layers.\1.attn_norm.\2"),
    (r"layers\.(\d+)\.ffn_norm\.(weight|bias)", r"{p}layers.\1.mlp_norm.\2"),
    (r"layers\.(\d+)\.attention\.o_proj\.(weight|bias)", r"{p}layers.\1.attn.Wo.\2"),
    (r"layers\.(\d+)\.ffn\.down_proj\.(weight|bias)", r"{p}layers.\1.mlp.Wo.\2"),
    (r"lm_head\.dense\.(weight|bias)", r"head.dense.\1"),
    (r"lm_head\.norm\.(weight|bias)", r"head.norm.\1"),
    (r"lm_head\.bias", "decoder.bias"),
    (r"lm_head\.weight", "decoder.weight"),  # untied only (a tied table is embed.weight)
]
# checkpoint tensors zoo's model does not hold: the tied decoder's copy of the embedding
IGNORED = re.compile(r"^decoder\.weight$")


def tensor_rules(zoo_names: Collection[str], hf_keys: Collection[str]) -> tuple[list[Rule], list[tuple[str, str]]]:
    """Fused Wqkv and Wi split into zoo's projections; the rest renamed."""
    masked = "lm_head.bias" in zoo_names
    p = "model." if masked else ""
    rules = []
    for name in sorted(zoo_names):
        for suffix in ("weight", "bias"):
            if name.endswith(f".attention.q_proj.{suffix}"):
                a = name.removesuffix(f".q_proj.{suffix}")
                i = a.split(".")[1]
                rules.append(
                    split_rows(tuple(f"{a}.{x}_proj.{suffix}" for x in "qkv"), f"{p}layers.{i}.attn.Wqkv.{suffix}")
                )
            if name.endswith(f".ffn.gate_proj.{suffix}"):
                f = name.removesuffix(f".gate_proj.{suffix}")
                i = f.split(".")[1]
                rules.append(
                    split_rows((f"{f}.gate_proj.{suffix}", f"{f}.up_proj.{suffix}"), f"{p}layers.{i}.mlp.Wi.{suffix}")
                )
    return rules, [(pattern, target.replace("{p}", p)) for pattern, target in RENAMES]

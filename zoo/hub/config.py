"""Hugging Face config.json <-> ModelSpec, for gpt2, llama, mistral, mixtral, qwen2, qwen3, qwen3_moe,
gpt_oss, gemma3_text, the encoders bert and roberta, mamba and falcon_mamba (``config_mamba.py``), the
families of ``families.py`` (modernbert, t5, bart) and the recurrent ones of ``config_recurrent.py``.

Every key of a config is either mapped into the spec, or neutral by the rule of
``zoo/hub/config_keys.py`` (it cannot change the forward pass: names, token ids, dropout,
training and generation options), or checked to hold the one value zoo computes; anything
else is a ``CheckpointError`` naming the key, so no field that changes the computation is
ever dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType
from pathlib import Path
from typing import Any

from zoo.errors import CheckpointError, PluginConflictError, SpecError, allowed, did_you_mean
from zoo.hub.config_keys import BASE_CHECKS, NEUTRAL_KEYS  # noqa: F401 - NEUTRAL_KEYS re-exported
from zoo.hub.config_input import check_value_types, read_hf_config  # noqa: F401 - read_hf_config re-exported
from zoo.hub.families.mamba import mamba_spec
from zoo.hub.config_reader import (  # noqa: F401  (re-exported: the readers' home before the split)
    ACTIVATIONS,
    ConfigReader,
    rope_options,
)
from zoo.hub.config_reader import layer_selector, rope_params  # noqa: F401
from zoo.hub.families.recurrent import RECURRENT_FAMILIES
from zoo.hub.families import bart, modernbert, t5
from zoo.specs.model import ModelSpec

def _window_layers(reader: ConfigReader, n_layers: int, window: int | None, default_sliding: bool) -> list[int]:
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


# the families that live in a module of their own (zoo.hub.dispatch dispatches their tensor names)
FAMILY_MODULES: dict[str, ModuleType] = {module.MODEL_TYPE: module for module in (modernbert, t5, bart)}

# ---- families -------------------------------------------------------------------------------
def _gpt2(r: ConfigReader) -> dict[str, Any]:
    d, heads = r.need("n_embd"), r.need("n_head")
    r.expect("scale_attn_by_inverse_layer_idx", (None, False), "per-layer attention scaling")
    scale = None if r.get("scale_attn_weights", True) else 1.0
    attention: dict[str, Any] = {"kind": "mha", "n_heads": heads, "head_dim": d // heads, "bias": True}
    if scale is not None:
        attention["scale"] = scale
    eps = r.get("layer_norm_epsilon", 1e-5)
    return {
        "vocab_size": r.need("vocab_size"), "d_model": d, "n_layers": r.need("n_layer"),
        "max_seq_len": r.get("n_positions", 1024), "tie_embeddings": r.get("tie_word_embeddings", True),
        "norm": {"kind": "layernorm", "eps": eps, "bias": True},
        "positional": {"kind": "learned"},
        "attention": attention,
        "ffn": {"kind": "mlp", "hidden": r.get("n_inner", 4 * d), "activation": r.activation("activation_function", "gelu_new"), "bias": True},
        "block": {"kind": "pre_norm"},
    }


def _llama_like(r: ConfigReader, *, qk_norm: bool = False, sliding_key: str | None = None) -> dict[str, Any]:
    d, heads = r.need("hidden_size"), r.need("num_attention_heads")
    n_layers = r.need("num_hidden_layers")
    key, params = rope_params(r)
    bias = bool(r.get("attention_bias", False))
    attention: dict[str, Any] = {
        "kind": "gqa", "n_heads": heads, "n_kv_heads": r.get("num_key_value_heads", heads),
        "head_dim": r.get("head_dim", d // heads), "bias": bias, "qk_norm": qk_norm,
    }
    spec: dict[str, Any] = {
        "vocab_size": r.need("vocab_size"), "d_model": d, "n_layers": n_layers,
        "max_seq_len": r.need("max_position_embeddings"), "tie_embeddings": bool(r.get("tie_word_embeddings", False)),
        "norm": {"kind": "rmsnorm", "eps": r.get("rms_norm_eps", 1e-6)},
        "positional": rope_options(r, params, key),
        "attention": attention,
        "ffn": {"kind": "swiglu", "hidden": r.get("intermediate_size"), "bias": bool(r.get("mlp_bias", False))},
        "block": {"kind": "pre_norm"},
        "layers": {},
    }
    if r.activation("hidden_act", "silu") != "silu":
        spec["ffn"] = {"kind": "gated", "hidden": spec["ffn"]["hidden"], "activation": ACTIVATIONS[r.config["hidden_act"]], "bias": spec["ffn"]["bias"]}
    window = r.get("sliding_window")
    enabled = bool(r.get(sliding_key, False)) if sliding_key else True
    if r.config.get("layer_types") is not None and not any(t == "sliding_attention" for t in r.config["layer_types"]):
        window = None  # every layer full: sliding_window, if set, is unused
    sliding = _window_layers(r, n_layers, window, default_sliding=enabled)
    if sliding and len(sliding) == n_layers:
        attention["window"] = window
    elif sliding:
        spec["layers"][layer_selector(sliding, n_layers)] = {"attention": {"window": window}}
    return spec


def _llama(r: ConfigReader) -> dict[str, Any]:
    """Llama: transformers' LlamaAttention attends to every earlier token, so a window in
    the config would be ignored there; zoo refuses it rather than compute something else."""
    if r.get("sliding_window") is not None:
        raise r.error("sliding_window", "transformers' Llama has no sliding window and would ignore it; "
                      "a windowed model of this shape is model_type 'mistral'")
    return _llama_like(r)


def _qwen2(r: ConfigReader) -> dict[str, Any]:
    """Qwen2: biases on the q, k and v projections (always), none on the output one."""
    spec = _llama_like(r, sliding_key="use_sliding_window")
    spec["attention"].update(bias=True, out_bias=False)
    return spec


def _mixtral(r: ConfigReader) -> dict[str, Any]:
    spec = _llama_like(r)
    spec["ffn"] = {"kind": "moe", "n_experts": r.need("num_local_experts"), "top_k": r.need("num_experts_per_tok"),
                   "hidden": r.need("intermediate_size"), "routing": "softmax_topk", "renormalize": True}
    return spec


def _qwen3_moe(r: ConfigReader) -> dict[str, Any]:
    spec = _llama_like(r, qk_norm=True, sliding_key="use_sliding_window")
    experts = r.get("num_experts") or r.get("num_local_experts")
    if experts is None:
        raise r.error("num_experts", "required but missing")
    spec["ffn"] = {"kind": "moe", "n_experts": experts, "top_k": r.need("num_experts_per_tok"),
                   "hidden": r.need("moe_intermediate_size"), "routing": "softmax_topk",
                   "renormalize": bool(r.get("norm_topk_prob", False))}
    step, dense = r.get("decoder_sparse_step", 1), set(r.get("mlp_only_layers", []))
    dense_layers = [i for i in range(spec["n_layers"]) if i in dense or (i + 1) % step != 0]
    if dense_layers:
        selector = layer_selector(dense_layers, spec["n_layers"])
        spec["layers"].setdefault(selector, {})["ffn"] = {"kind": "swiglu", "hidden": r.need("intermediate_size")}
    return spec


def _gpt_oss(r: ConfigReader) -> dict[str, Any]:
    spec = _llama_like(r)
    r.expect("hidden_act", (None, "silu"), "gpt-oss experts use their clamped SwiGLU")
    spec["attention"].update(sinks=True)
    spec["ffn"] = {
        "kind": "moe", "n_experts": r.need("num_local_experts"),
        "top_k": r.get("num_experts_per_tok") or r.need("experts_per_token"), "hidden": r.need("intermediate_size"),
        "activation": "swiglu_oai", "bias": True, "router_bias": True, "routing": "topk_softmax",
        "clamp_limit": r.get("swiglu_limit", 7.0), "alpha": r.get("swiglu_alpha", 1.702),
    }
    r.used.add("experts_per_token")
    r.get("initial_context_length")  # informational: YaRN reads original_max_position_embeddings
    return spec


def _gemma3(r: ConfigReader) -> dict[str, Any]:
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        r.expect(key, (None,), "logit soft-capping is not implemented in zoo")
    r.expect("use_bidirectional_attention", (None, False), "zoo models are causal")
    d, heads, n_layers = r.need("hidden_size"), r.need("num_attention_heads"), r.need("num_hidden_layers")
    kv = r.get("num_key_value_heads", heads)
    head_dim = r.get("head_dim", d // heads)
    key, params = rope_params(r)
    params = dict(params or {})
    if "full_attention" in params or "sliding_attention" in params:  # transformers 5: one dict per layer type
        global_rope = rope_options(r, params.get("full_attention"), f"{key}.full_attention")
        local_rope = rope_options(r, params.get("sliding_attention"), f"{key}.sliding_attention")
    else:  # transformers 4: rope_theta + rope_scaling for global layers, rope_local_base_freq for local
        global_rope = rope_options(r, params, key)
        local_rope = {"kind": "rope", "theta": float(r.get("rope_local_base_freq", 10000.0))}
    r.used.add("rope_local_base_freq")
    window = r.need("sliding_window")
    types = r.config.get("layer_types")
    if types is None:
        pattern = r.config.get("sliding_window_pattern") or r.config.get("_sliding_window_pattern") or 6
        types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n_layers)]
        r.config["layer_types"] = types
    sliding = _window_layers(r, n_layers, window, default_sliding=False)
    full = [i for i in range(n_layers) if i not in sliding]
    attention = {"kind": "mqa" if kv == 1 else "gqa", "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
                 "qk_norm": True, "bias": bool(r.get("attention_bias", False)),
                 "scale": float(r.get("query_pre_attn_scalar", head_dim)) ** -0.5, "window": window}
    layers: dict[str, Any] = {}
    if full:
        layers[layer_selector(full, n_layers)] = {"attention": {"window": None}, "positional": global_rope}
    return {
        "vocab_size": r.need("vocab_size"), "d_model": d, "n_layers": n_layers,
        "max_seq_len": r.need("max_position_embeddings"), "tie_embeddings": bool(r.get("tie_word_embeddings", True)),
        "embedding_scale": "sqrt_d_model",
        "norm": {"kind": "rmsnorm", "eps": r.get("rms_norm_eps", 1e-6), "unit_offset": True},
        "positional": local_rope if sliding else global_rope,
        "attention": attention if sliding else {**attention, "window": None},
        "ffn": _gemma_ffn(r.activation("hidden_activation", "gelu_pytorch_tanh"), r.need("intermediate_size")),
        "block": {"kind": "sandwich"},
        "layers": layers if sliding else {},
    }


def _gemma_ffn(activation: str, hidden: int) -> dict[str, Any]:
    if activation == "gelu_tanh":
        return {"kind": "geglu", "hidden": hidden}
    return {"kind": "gated", "hidden": hidden, "activation": activation}


def _bert(r: ConfigReader, roberta: bool = False) -> dict[str, Any]:
    """BERT and RoBERTa: post-norm bidirectional encoders. The head follows
    ``architectures`` (``*ForMaskedLM``/``*ForPreTraining``: the masked-LM head; otherwise
    BertModel's pooler). RoBERTa numbers real tokens from ``pad_token_id + 1``."""
    r.expect("position_embedding_type", (None, "absolute"), "relative position embeddings are not implemented")
    r.expect("is_decoder", (None, False), "zoo's bert is the encoder; a causal BERT is a decoder spec")
    d, heads = r.need("hidden_size"), r.need("num_attention_heads")
    table = r.need("max_position_embeddings")
    positional: dict[str, Any] = {"kind": "learned", "max_positions": table}
    max_seq_len = table
    if roberta:
        offset = int(r.config.get("pad_token_id") if r.config.get("pad_token_id") is not None else 1) + 1
        positional.update(offset=offset, count_tokens=True)
        max_seq_len = table - offset
    heads_for = [str(a) for a in r.get("architectures", [])]
    masked = any(a.endswith(("ForMaskedLM", "ForPreTraining")) for a in heads_for)
    return {
        "vocab_size": r.need("vocab_size"), "d_model": d, "n_layers": r.need("num_hidden_layers"),
        "max_seq_len": max_seq_len, "tie_embeddings": bool(r.get("tie_word_embeddings", True)),
        "norm": {"kind": "layernorm", "eps": r.get("layer_norm_eps", 1e-12), "bias": True},
        "positional": positional,
        "attention": {"kind": "mha", "n_heads": heads, "head_dim": d // heads, "bias": True, "causal": False},
        "ffn": {"kind": "mlp", "hidden": r.need("intermediate_size"), "activation": r.activation("hidden_act", "gelu"), "bias": True},
        "block": {"kind": "post_norm"},
        "embedding": {"kind": "token", "type_vocab_size": r.get("type_vocab_size", 2), "norm": True},
        "head": {"kind": "masked_lm" if masked else "pooler", **({"activation": r.activation("hidden_act", "gelu")} if masked else {})},
        "final_norm": False,
    }


FAMILIES: dict[str, Callable[[ConfigReader], dict[str, Any]]] = {
    "gpt2": _gpt2,
    "llama": _llama,
    "mistral": _llama_like,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen3": lambda r: _llama_like(r, qk_norm=True, sliding_key="use_sliding_window"),
    "qwen3_moe": _qwen3_moe,
    "gpt_oss": _gpt_oss,
    "gemma3_text": _gemma3,
    "mamba": mamba_spec,
    "falcon_mamba": lambda r: mamba_spec(r, falcon=True),
    "bert": _bert,
    "roberta": lambda r: _bert(r, roberta=True),
    **{model_type: module.read_config for model_type, module in FAMILY_MODULES.items()},
    **RECURRENT_FAMILIES,
}


def plugin_families() -> dict[str, Any]:
    """model_type -> the CheckpointFamily a plugin registered (the registry is built if needed)."""
    from zoo.specs.registry import get_registry  # the registry imports plugins: only when asked

    return {model_type: entry.family for model_type, entry in get_registry().checkpoint_formats.items()}


def family_module(model_type: str) -> Any | None:
    """The family object for ``model_type``: a plugin's, else a built-in module, else None
    (the families of ``zoo.hub.names`` / ``zoo.hub.config``). A model type zoo reads itself
    is taken over by a plugin only with ``override=True``."""
    from zoo.specs.registry import get_registry  # the registry imports plugins: only when asked

    entry = get_registry().checkpoint_formats.get(model_type)
    if entry is not None:
        if entry.override or model_type not in FAMILIES:
            return entry.family
        raise PluginConflictError(
            f"checkpoint format {model_type!r} is built into zoo and plugin {entry.plugin!r} registers it "
            "without override=True; pass override=True to replace it, or leave the plugin out with ZOO_PLUGINS"
        )
    return FAMILY_MODULES.get(model_type)



def supported_model_types() -> list[str]:
    """Every model_type zoo reads: the built-in families and those plugins registered."""
    return sorted({*FAMILIES, *plugin_families()})


def config_reader(model_type: Any, source: str) -> Callable[[ConfigReader], dict[str, Any]]:
    """The function reading ``model_type``'s config: a plugin's family, else a built-in one."""
    plugin = family_module(model_type) if isinstance(model_type, str) else None
    if plugin is not None:
        return plugin.read_config
    if model_type not in FAMILIES:
        types = supported_model_types()
        raise CheckpointError(
            f"{source}: model_type: {model_type!r} is not supported{did_you_mean(str(model_type), types)}; "
            f"allowed: {allowed(types)}"
        )
    return FAMILIES[model_type]


def spec_from_hf_config(config: str | Path | Mapping[str, Any], name: str | None = None) -> ModelSpec:
    """The ModelSpec computing what transformers computes for this config.json."""
    data, source = read_hf_config(config)
    check_value_types(data, source)
    model_type = data.get("model_type")
    read = config_reader(model_type, source)
    quantization = data.get("quantization_config")
    method = quantization.get("quant_method") if isinstance(quantization, dict) else quantization
    if quantization is not None and not (model_type == "gpt_oss" and method == "mxfp4"):
        raise CheckpointError(f"{source}: quantization_config: quantized checkpoints ({method}) are not supported; "
                              "allowed: unquantized safetensors, or gpt_oss with mxfp4 experts (dequantized on load)")
    reader = ConfigReader(data, source)
    reader.used.add("quantization_config")  # mxfp4 experts: the loader dequantizes them
    try:
        spec = read(reader)
    except (TypeError, ValueError, ArithmeticError, AttributeError, KeyError) as exc:  # a shape no check above foresaw
        raise CheckpointError(f"{source}: malformed config ({type(exc).__name__}: {str(exc)[:200]})") from None
    for key, (inert, why) in BASE_CHECKS.items():  # unless the family read it (t5, bart: encoder-decoders)
        if key not in reader.used:
            reader.expect(key, inert, why)
    reader.check_all_used()
    spec["name"] = name or data.get("_name_or_path") or f"hf-{model_type}"
    spec["source"] = source if not isinstance(config, Mapping) else f"hf config ({model_type})"
    try:
        return ModelSpec.model_validate(spec)
    except SpecError as exc:
        raise CheckpointError(f"{source}: the config maps to an invalid spec: {exc}") from None


def eos_token_ids(folder: Path) -> list[int]:
    """End-of-sequence ids from generation_config.json, else config.json (an id or a list);
    a file that is not JSON, or an id that is not a non-negative integer, is a CheckpointError."""
    from zoo.files.safe_io import inside, load_json, read_text

    for name in ("generation_config.json", "config.json"):
        path = Path(folder) / name
        if not path.exists():
            continue
        real = inside(folder, name, CheckpointError, name)
        data = load_json(read_text(real, CheckpointError, name), CheckpointError, str(path))
        if not isinstance(data, dict):
            raise CheckpointError(f"{path}: expected a JSON object")
        value = data.get("eos_token_id")
        if value is None:
            continue
        ids = value if isinstance(value, list) else [value]
        if not ids or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in ids):
            raise CheckpointError(f"{path}: eos_token_id: expected a token id or a list of them, got {value!r}"[:300])
        return list(ids)
    return []

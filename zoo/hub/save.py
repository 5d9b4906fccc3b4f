"""save_pretrained: a ZooModel -> safetensors + an HF-style config.json transformers can load.

The config is written for one Hugging Face family (the one the model was loaded from, or
the first whose config reproduces the spec exactly); it is read back through
``spec_from_hf_config`` and must give the same per-layer components, so what is saved
always means what the model computes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from zoo.files.atomic import write_text_atomic
from zoo.errors import CheckpointError
from zoo.hub.config import FAMILIES, spec_from_hf_config, supported_model_types
from zoo.hub.families.mamba import mamba_config
from zoo.hub.families.recurrent import RECURRENT_ARCHITECTURES, RECURRENT_WRITERS
from zoo.hub.dispatch import FAMILY_MODULES, family_module, plugin_families, tensor_rules
from zoo.hub.safetensors_io import write_safetensors
from zoo.components.fused import unfused_parameters
from zoo.model.build import ZooModel, persistent_buffers
from zoo.specs.model import ModelSpec

ARCHITECTURES = {
    "gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
    "gpt_oss": "GptOssForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
    "mamba": "MambaForCausalLM", "falcon_mamba": "FalconMambaForCausalLM",
    "bert": "BertModel", "roberta": "RobertaModel",
    **RECURRENT_ARCHITECTURES,
    **{model_type: module.ARCHITECTURE for model_type, module in FAMILY_MODULES.items()},
}
MASKED_LM_ARCHITECTURES = {"bert": "BertForMaskedLM", "roberta": "RobertaForMaskedLM"}


# the rope_parameters keys transformers reads for each scaling type (others it warns about)
SCALING_KEYS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
             "attention_factor", "truncate"),
}


def _rope(positional: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"rope_type": "default", "rope_theta": positional.theta}
    if positional.scaling is not None:
        scaling = positional.scaling.model_dump(exclude_none=True)
        kind = scaling.pop("type")
        out.update(rope_type=kind, **{k: v for k, v in scaling.items() if k in SCALING_KEYS[kind]})
    if positional.partial_rotary_factor != 1.0:
        out["partial_rotary_factor"] = positional.partial_rotary_factor
    return out


def _integral(value: float) -> float | int:
    return round(value) if abs(value - round(value)) < 1e-6 * max(1.0, abs(value)) else value


def _windows(spec: ModelSpec) -> tuple[list[str], int | None]:
    windows = [layer.attention.window for layer in spec.layer_specs()]
    sizes = {w for w in windows if w}
    if len(sizes) > 1:
        raise CheckpointError(f"layers: windows {sorted(sizes)} differ between layers; HF configs hold one sliding_window")
    return ["sliding_attention" if w else "full_attention" for w in windows], (sizes.pop() if sizes else None)


def _bert_config(spec: ModelSpec, model_type: str) -> dict[str, Any]:
    base = spec.layer(0)
    att, ffn, norm, positional = base.attention, base.ffn, base.norm, base.positional
    embedding = spec.part("embedding")
    config: dict[str, Any] = {
        "model_type": model_type, "vocab_size": spec.vocab_size, "hidden_size": spec.d_model,
        "num_hidden_layers": spec.n_layers, "num_attention_heads": att.n_heads, "intermediate_size": ffn.hidden,
        "hidden_act": ffn.activation, "max_position_embeddings": positional.max_positions or spec.max_seq_len,
        "type_vocab_size": embedding.type_vocab_size, "layer_norm_eps": norm.eps,
        "tie_word_embeddings": spec.tie_embeddings, "position_embedding_type": "absolute",
    }
    if model_type == "roberta":
        config["pad_token_id"] = positional.offset - 1
    masked = spec.head.kind == "masked_lm"
    config["architectures"] = [(MASKED_LM_ARCHITECTURES if masked else ARCHITECTURES)[model_type]]
    return config


def hf_config_from_spec(spec: ModelSpec, model_type: str) -> dict[str, Any]:
    """The config.json of ``model_type`` that computes what ``spec`` computes."""
    family = family_module(model_type)
    if family is not None:  # a plugin's family, or a built-in one with a module of its own
        return family.write_config(spec)
    if model_type in ("bert", "roberta"):
        return _bert_config(spec, model_type)
    if model_type in RECURRENT_WRITERS:
        return RECURRENT_WRITERS[model_type](spec)
    base = spec.layer(0)
    att, ffn, norm = base.attention, base.ffn, base.norm
    if model_type in ("mamba", "falcon_mamba"):
        return mamba_config(spec, model_type)
    if model_type == "gpt2":
        return {"model_type": "gpt2", "vocab_size": spec.vocab_size, "n_embd": spec.d_model, "n_layer": spec.n_layers,
                "n_head": att.n_heads, "n_positions": spec.max_seq_len, "n_inner": ffn.hidden,
                "activation_function": {"gelu_tanh": "gelu_new"}.get(ffn.activation, ffn.activation),
                "layer_norm_epsilon": norm.eps, "tie_word_embeddings": spec.tie_embeddings,
                "scale_attn_weights": att.scale is None}
    types, window = _windows(spec)
    config: dict[str, Any] = {
        "model_type": model_type, "vocab_size": spec.vocab_size, "hidden_size": spec.d_model,
        "num_hidden_layers": spec.n_layers, "num_attention_heads": att.n_heads, "num_key_value_heads": att.kv_heads,
        "head_dim": att.head_dim, "max_position_embeddings": spec.max_seq_len, "rms_norm_eps": norm.eps,
        "tie_word_embeddings": spec.tie_embeddings, "rope_parameters": _rope(base.positional),
        "hidden_act": "silu", "sliding_window": window,
    }
    if model_type in ("llama", "qwen3", "qwen3_moe", "gpt_oss", "gemma3_text"):
        config["attention_bias"] = att.bias
    if model_type in ("qwen2", "qwen3", "qwen3_moe", "gpt_oss", "gemma3_text"):
        config["layer_types"] = types
    if model_type in ("qwen2", "qwen3", "qwen3_moe"):
        config["use_sliding_window"] = window is not None
    if model_type == "llama":
        config["mlp_bias"] = getattr(ffn, "bias", False)
    moe = next((layer.ffn for layer in spec.layer_specs() if layer.ffn.kind == "moe"), None)
    dense = next((layer.ffn for layer in spec.layer_specs() if layer.ffn.kind != "moe"), None)
    if dense is not None:
        config["intermediate_size"] = dense.hidden
    if model_type == "mixtral" and moe is not None:
        config.update(num_local_experts=moe.n_experts, num_experts_per_tok=moe.top_k, intermediate_size=moe.hidden)
    if model_type == "qwen3_moe" and moe is not None:
        config.update(num_experts=moe.n_experts, num_experts_per_tok=moe.top_k, moe_intermediate_size=moe.hidden,
                      norm_topk_prob=moe.renormalize, decoder_sparse_step=1,
                      mlp_only_layers=[layer.index for layer in spec.layer_specs() if layer.ffn.kind != "moe"])
    if model_type == "gpt_oss" and moe is not None:
        config.update(num_local_experts=moe.n_experts, num_experts_per_tok=moe.top_k, intermediate_size=moe.hidden,
                      swiglu_limit=moe.clamp_limit, swiglu_alpha=moe.alpha)
    if model_type == "gemma3_text":
        full = next((layer for layer in spec.layer_specs() if not layer.attention.window), base)
        local = next((layer for layer in spec.layer_specs() if layer.attention.window), base)
        config.update(hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=_integral((att.scale or att.head_dim**-0.5) ** -2),
                      rope_parameters={"full_attention": _rope(full.positional), "sliding_attention": _rope(local.positional)},
                      final_logit_softcapping=None, attn_logit_softcapping=None, sliding_window=window or spec.max_seq_len)
        config.pop("hidden_act")
    return config


def _same_computation(a: ModelSpec, b: ModelSpec) -> bool:
    top = ("vocab_size", "d_model", "n_layers", "max_seq_len", "tie_embeddings", "embedding", "head", "final_norm",
           "encoder", "cross_attention")
    if any(getattr(a, k) != getattr(b, k) for k in top) or a.resolved_embedding_scale != b.resolved_embedding_scale:
        return False
    fams = ("norm", "positional", "attention", "ffn", "block")
    return all(
        getattr(la, f).to_dict() == getattr(lb, f).to_dict() for la, lb in zip(a.layer_specs(), b.layer_specs()) for f in fams
    )


def matching_config(spec: ModelSpec, model_type: str | None) -> dict[str, Any]:
    """The HF config for the given family, or the first family that reproduces the spec."""
    plugins = plugin_families()
    candidates = [model_type] if model_type else [*FAMILIES, *(t for t in plugins if t not in FAMILIES)]
    for candidate in candidates:
        if candidate not in FAMILIES and candidate not in plugins:
            raise CheckpointError(f"model_type: {candidate!r} is not supported; allowed: {', '.join(supported_model_types())}")
        try:
            config = hf_config_from_spec(spec, candidate)
            if _same_computation(spec, spec_from_hf_config(config)):
                family = family_module(candidate)
                architecture = family.ARCHITECTURE if family is not None else ARCHITECTURES[candidate]
                return {"architectures": [architecture], **config}  # bert's own wins
        except (CheckpointError, AttributeError, TypeError):
            continue
    which = f"a {model_type} config" if model_type else "any supported Hugging Face family"
    raise CheckpointError(f"spec {spec.name!r}: cannot be written as {which} that computes the same model")


def save_pretrained(model: ZooModel, out_dir: str | Path, model_type: str | None = None) -> Path:
    """Write ``model.safetensors`` and ``config.json`` (files replaced whole) into ``out_dir``;
    a model loaded from a GGUF also gets the file's tokenizer, chat template and bos/eos ids."""
    from zoo.hub.text import tokenizer_files
    from zoo.quant.linear import QuantizedLinear

    if any(isinstance(m, QuantizedLinear) for m in model.modules()):
        raise CheckpointError("save_pretrained: the model holds packed int4/int8 layers (a GGUF loaded quantized); "
                              "load it with dequantize=True to write safetensors")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = matching_config(model.spec, model_type or getattr(model, "hf_model_type", None))
    params = {**unfused_parameters(model), **persistent_buffers(model)}  # zoo.fuse_projections undone
    first = next(iter(params.values()))
    config["dtype"] = str(first.dtype).removeprefix("torch.")
    tensors: dict[str, torch.Tensor] = {}
    for rule in tensor_rules(config["model_type"], {n: p.shape for n, p in params.items()}, ()):
        with torch.no_grad():
            for name, tensor in zip(rule.hf, rule.save([params[n] for n in rule.zoo])):
                tensors[name] = tensor
    text = tokenizer_files(model.checkpoint) if model.checkpoint is not None else {}
    if "generation_config.json" in text:  # the GGUF's ids, also where transformers' config has them
        config.update({k: v for k, v in json.loads(text["generation_config.json"]).items()})
    write_safetensors(tensors, out / "model.safetensors", metadata={"format": "pt"})
    write_text_atomic(out / "config.json", json.dumps(config, indent=2) + "\n")
    for name, content in text.items():
        write_text_atomic(out / name, content)
    return out

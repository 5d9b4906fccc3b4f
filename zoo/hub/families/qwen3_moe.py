"""The Hugging Face ``qwen3_moe`` checkpoint family (transformers' Qwen3MoeForCausalLM):
Qwen3 with softmax-top-k experts, dense SwiGLU layers where ``decoder_sparse_step`` or
``mlp_only_layers`` say so."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

import torch

from zoo.hub.config_reader import ConfigReader, layer_selector
from zoo.hub.llama_like import (
    LLAMA_RENAMES,
    expert_rules,
    experts,
    moe_ffn,
    read_llama_like,
    windows,
    write_llama_like,
)
from zoo.hub.names import Rule
from zoo.specs.model import ModelSpec

MODEL_TYPE = "qwen3_moe"
ARCHITECTURE = "Qwen3MoeForCausalLM"
IGNORED = re.compile("$^")


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a qwen3_moe config.json."""
    spec = read_llama_like(r, qk_norm=True, sliding_key="use_sliding_window")
    n_experts = r.get("num_experts") or r.get("num_local_experts")
    if n_experts is None:
        raise r.error("num_experts", "required but missing")
    experts(
        r,
        spec,
        n_experts=n_experts,
        hidden_key="moe_intermediate_size",
        renormalize=bool(r.get("norm_topk_prob", False)),
    )
    step, dense = r.get("decoder_sparse_step", 1), set(r.get("mlp_only_layers", []))
    dense_layers = [i for i in range(spec["n_layers"]) if i in dense or (i + 1) % step != 0]
    if dense_layers:
        selector = layer_selector(dense_layers, spec["n_layers"])
        spec["layers"].setdefault(selector, {})["ffn"] = {"kind": "swiglu", "hidden": r.need("intermediate_size")}
    return spec


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The qwen3_moe config.json computing what ``spec`` computes."""
    config = write_llama_like(spec, MODEL_TYPE, ffn_kinds=("moe", "swiglu"))
    types, window = windows(spec)
    config.update(
        attention_bias=spec.layer(0).attention.options.bias, layer_types=types, use_sliding_window=window is not None
    )
    moe = moe_ffn(spec)
    if moe is not None:
        config.update(
            num_experts=moe.n_experts,
            num_experts_per_tok=moe.top_k,
            moe_intermediate_size=moe.hidden,
            norm_topk_prob=moe.renormalize,
            decoder_sparse_step=1,
            mlp_only_layers=[layer.index for layer in spec.layer_specs() if layer.ffn.kind != "moe"],
        )
    return config


def tensor_rules(
    zoo_shapes: Mapping[str, torch.Size], hf_keys: Collection[str]
) -> tuple[list[Rule], list[tuple[str, str]]]:
    """Experts per expert or fused under ``mlp``; the rest renamed as Llama's."""
    return expert_rules(zoo_shapes, hf_keys, "mlp", "gate", ("gate_proj", "up_proj", "down_proj")), LLAMA_RENAMES

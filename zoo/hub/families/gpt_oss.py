"""The Hugging Face ``gpt_oss`` checkpoint family (transformers' GptOssForCausalLM).

Attention with learned sinks and biases; experts with gpt-oss's clamped SwiGLU, biases and a
biased router, routed top-k then softmax. Experts are stored with ``gate_up_proj`` (E, d, 2F)
interleaving gate (even columns) and up (odd), or as the hub's MXFP4 blocks and scales
(``quantization_config.quant_method: mxfp4``), dequantized expert by expert on load.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

import torch

from zoo.hub.config_reader import ConfigReader
from zoo.hub.llama_like import (
    LLAMA_RENAMES,
    layers_with,
    moe_ffn,
    read_llama_like,
    windows,
    write_llama_like,
)
from zoo.hub.names import (
    Rule,
    interleaved_gate_up,
    mxfp4_down,
    mxfp4_gate_up,
    rename,
    transposed_experts,
)
from zoo.specs.model import ModelSpec

MODEL_TYPE = "gpt_oss"
ARCHITECTURE = "GptOssForCausalLM"
IGNORED = re.compile("$^")


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a gpt_oss config.json (MXFP4-quantized experts included)."""
    quantization = r.get("quantization_config")
    if quantization is not None and quantization.get("quant_method") != "mxfp4":
        raise r.error(
            "quantization_config",
            f"quantized checkpoints ({quantization.get('quant_method')}) are not "
            "supported; allowed: unquantized safetensors, or mxfp4 experts (dequantized on load)",
        )
    spec = read_llama_like(r)
    r.expect("hidden_act", (None, "silu"), "gpt-oss experts use their clamped SwiGLU")
    spec["attention"].update(sinks=True)
    spec["ffn"] = {
        "kind": "moe",
        "n_experts": r.need("num_local_experts"),
        "top_k": r.get("num_experts_per_tok") or r.need("experts_per_token"),
        "hidden": r.need("intermediate_size"),
        "activation": "swiglu_oai",
        "bias": True,
        "router_bias": True,
        "routing": "topk_softmax",
        "clamp_limit": r.get("swiglu_limit", 7.0),
        "alpha": r.get("swiglu_alpha", 1.702),
    }
    r.used.add("experts_per_token")
    r.get("initial_context_length")  # informational: YaRN reads original_max_position_embeddings
    return spec


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The gpt_oss config.json computing what ``spec`` computes."""
    config = write_llama_like(spec, MODEL_TYPE, ffn_kinds=("moe",))
    types, _ = windows(spec)
    moe = moe_ffn(spec)
    config.update(
        attention_bias=spec.layer(0).attention.options.bias,
        layer_types=types,
        num_local_experts=moe.n_experts,
        num_experts_per_tok=moe.top_k,
        intermediate_size=moe.hidden,
        swiglu_limit=moe.clamp_limit,
        swiglu_alpha=moe.alpha,
    )
    return config


def tensor_rules(
    zoo_shapes: Mapping[str, torch.Size], hf_keys: Collection[str]
) -> tuple[list[Rule], list[tuple[str, str]]]:
    """Experts (plain or MXFP4) with their biases and the router; the rest renamed as Llama's."""
    rules = []
    for i in layers_with(zoo_shapes, r"ffn\.w_up"):
        z, h = f"layers.{i}.ffn", f"model.layers.{i}.mlp"
        if f"{h}.experts.gate_up_proj_blocks" in hf_keys:  # the hub's MXFP4 experts
            x = f"{h}.experts"
            rules += [
                mxfp4_gate_up((f"{z}.w_gate", f"{z}.w_up"), (f"{x}.gate_up_proj_blocks", f"{x}.gate_up_proj_scales")),
                mxfp4_down(f"{z}.w_down", (f"{x}.down_proj_blocks", f"{x}.down_proj_scales")),
            ]
        else:
            rules += [
                interleaved_gate_up((f"{z}.w_gate", f"{z}.w_up"), f"{h}.experts.gate_up_proj", weight=True),
                transposed_experts(f"{z}.w_down", f"{h}.experts.down_proj"),
            ]
        rules += [
            interleaved_gate_up((f"{z}.b_gate", f"{z}.b_up"), f"{h}.experts.gate_up_proj_bias", weight=False),
            rename(f"{z}.b_down", f"{h}.experts.down_proj_bias"),
            rename(f"{z}.router.weight", f"{h}.router.weight"),
            rename(f"{z}.router.bias", f"{h}.router.bias"),
        ]
    return rules, LLAMA_RENAMES

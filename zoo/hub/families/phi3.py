"""The Hugging Face ``phi3`` checkpoint family (transformers' Phi3ForCausalLM; Phi-3 mini and
medium).

A llama-like decoder (RMSNorm, RoPE, SwiGLU, no biases) whose checkpoints fuse q, k and v into
one ``qkv_proj`` (rows: queries, then keys, then values) and gate and up into one
``gate_up_proj`` (rows: gate, then up); zoo splits them on load and concatenates them on save.
A ``sliding_window`` applies to every layer, as in Mistral. Plain RoPE only: Phi-3's
long-context ``longrope`` scaling (``rope_type`` longrope, or the older ``su`` / ``yarn``
names transformers maps to it) is refused with an error naming the key.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from zoo.hub.config_reader import ConfigReader
from zoo.hub.llama_like import (
    LLAMA_RENAMES,
    layers_with,
    read_llama_like,
    write_llama_like,
)
from zoo.hub.names import Rule, split_rows
from zoo.specs.model import ModelSpec

MODEL_TYPE = "phi3"
ARCHITECTURE = "Phi3ForCausalLM"
IGNORED = re.compile("$^")


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a phi3 config.json."""
    for key in ("rope_parameters", "rope_scaling"):
        params = r.config.get(key)
        kind = (params.get("rope_type") or params.get("type") or "default") if params is not None else "default"
        if kind != "default":
            raise r.error(
                f"{key}.rope_type",
                f"{kind!r} is not supported for phi3 (Phi-3's long-context LongRoPE is "
                "not implemented); allowed: 'default'",
            )
    for key in ("attention_bias", "mlp_bias"):
        r.expect(key, (None, False), "Phi-3's projections have no biases")
    r.used.add("original_max_position_embeddings")  # read by longrope scaling only
    return read_llama_like(r)


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The phi3 config.json computing what ``spec`` computes."""
    # token ids are the tokenizer's, not the spec's: transformers' defaults (32000) would not
    # even fit a smaller vocabulary
    return {**write_llama_like(spec, MODEL_TYPE), **dict.fromkeys(("bos_token_id", "eos_token_id", "pad_token_id"))}


def tensor_rules(zoo_names: Collection[str], hf_keys: Collection[str]) -> tuple[list[Rule], list[tuple[str, str]]]:
    """Fused qkv_proj and gate_up_proj split into zoo's projections; the rest renamed as Llama's."""
    rules = []
    for i in layers_with(zoo_names, r"attention\.q_proj\.weight"):
        a = f"layers.{i}.attention"
        rules.append(
            split_rows(
                (f"{a}.q_proj.weight", f"{a}.k_proj.weight", f"{a}.v_proj.weight"),
                f"model.layers.{i}.self_attn.qkv_proj.weight",
            )
        )
    for i in layers_with(zoo_names, r"ffn\.gate_proj\.weight"):
        f = f"layers.{i}.ffn"
        rules.append(
            split_rows((f"{f}.gate_proj.weight", f"{f}.up_proj.weight"), f"model.layers.{i}.mlp.gate_up_proj.weight")
        )
    return rules, LLAMA_RENAMES

"""The Hugging Face ``mixtral`` checkpoint family (transformers' MixtralForCausalLM): Mistral
with softmax-top-k experts (renormalised) in every layer; the hub's per-expert tensors sit
under ``block_sparse_moe`` (w1 gate, w3 up, w2 down), transformers 5's fused ones under ``mlp``."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

import torch

from zoo.hub.config_reader import ConfigReader
from zoo.hub.llama_like import (
    LLAMA_RENAMES,
    expert_rules,
    experts,
    moe_ffn,
    read_llama_like,
    write_llama_like,
)
from zoo.hub.names import Rule
from zoo.specs.model import ModelSpec

MODEL_TYPE = "mixtral"
ARCHITECTURE = "MixtralForCausalLM"
IGNORED = re.compile("$^")


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a mixtral config.json."""
    spec = read_llama_like(r)
    experts(r, spec, n_experts=r.need("num_local_experts"), hidden_key="intermediate_size", renormalize=True)
    return spec


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The mixtral config.json computing what ``spec`` computes."""
    config = write_llama_like(spec, MODEL_TYPE, ffn_kinds=("moe",))
    moe = moe_ffn(spec)
    config.update(num_local_experts=moe.n_experts, num_experts_per_tok=moe.top_k, intermediate_size=moe.hidden)
    return config


def tensor_rules(
    zoo_shapes: Mapping[str, torch.Size], hf_keys: Collection[str]
) -> tuple[list[Rule], list[tuple[str, str]]]:
    """Experts per expert (under mlp or block_sparse_moe) or fused; the rest renamed as Llama's."""
    prefix = "mlp" if any(".mlp.gate.weight" in k for k in hf_keys) else "block_sparse_moe"
    return expert_rules(zoo_shapes, hf_keys, prefix, "gate", ("w1", "w3", "w2")), LLAMA_RENAMES

"""The Hugging Face ``llama`` checkpoint family (transformers' LlamaForCausalLM).

transformers' LlamaAttention attends to every earlier token, so a window in the config would
be ignored there; zoo refuses it rather than compute something else.
"""

from __future__ import annotations

import re
from typing import Any

from zoo.hub.config_reader import ConfigReader
from zoo.hub.llama_like import (
    LLAMA_RENAMES,
    no_rules,
    read_llama_like,
    write_llama_like,
)
from zoo.specs.model import ModelSpec

MODEL_TYPE = "llama"
ARCHITECTURE = "LlamaForCausalLM"
IGNORED = re.compile("$^")


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a llama config.json."""
    if r.get("sliding_window") is not None:
        raise r.error(
            "sliding_window",
            "transformers' Llama has no sliding window and would ignore it; "
            "a windowed model of this shape is model_type 'mistral'",
        )
    return read_llama_like(r)


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The llama config.json computing what ``spec`` computes."""
    config = write_llama_like(spec, MODEL_TYPE)
    base = spec.layer(0)
    config.update(attention_bias=base.attention.options.bias, mlp_bias=base.ffn.options.bias)
    return config


tensor_rules = no_rules(LLAMA_RENAMES)

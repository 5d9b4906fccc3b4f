"""The Hugging Face ``qwen3`` checkpoint family (transformers' Qwen3ForCausalLM): Llama with
RMS norms on queries and keys; a window only with ``use_sliding_window``."""

from __future__ import annotations

import re
from typing import Any

from zoo.hub.config_reader import ConfigReader
from zoo.hub.llama_like import (
    LLAMA_RENAMES,
    no_rules,
    read_llama_like,
    windows,
    write_llama_like,
)
from zoo.specs.model import ModelSpec

MODEL_TYPE = "qwen3"
ARCHITECTURE = "Qwen3ForCausalLM"
IGNORED = re.compile("$^")


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a qwen3 config.json."""
    return read_llama_like(r, qk_norm=True, sliding_key="use_sliding_window")


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The qwen3 config.json computing what ``spec`` computes."""
    config = write_llama_like(spec, MODEL_TYPE)
    types, window = windows(spec)
    config.update(
        attention_bias=spec.layer(0).attention.options.bias, layer_types=types, use_sliding_window=window is not None
    )
    return config


tensor_rules = no_rules(LLAMA_RENAMES)

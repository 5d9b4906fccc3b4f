"""The Hugging Face ``qwen2`` checkpoint family (transformers' Qwen2ForCausalLM): biases on
the q, k and v projections (always), none on the output one; a window only with
``use_sliding_window``."""

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

MODEL_TYPE = "qwen2"
ARCHITECTURE = "Qwen2ForCausalLM"
IGNORED = re.compile("$^")


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a qwen2 config.json."""
    spec = read_llama_like(r, sliding_key="use_sliding_window")
    spec["attention"].update(bias=True, out_bias=False)
    return spec


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The qwen2 config.json computing what ``spec`` computes."""
    config = write_llama_like(spec, MODEL_TYPE)
    types, window = windows(spec)
    config.update(layer_types=types, use_sliding_window=window is not None)
    return config


tensor_rules = no_rules(LLAMA_RENAMES)

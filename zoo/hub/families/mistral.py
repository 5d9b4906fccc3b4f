"""The Hugging Face ``mistral`` checkpoint family (transformers' MistralForCausalLM): Llama
with a sliding window on every layer."""

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

MODEL_TYPE = "mistral"
ARCHITECTURE = "MistralForCausalLM"
IGNORED = re.compile("$^")


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a mistral config.json."""
    return read_llama_like(r)


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The mistral config.json computing what ``spec`` computes."""
    return write_llama_like(spec, MODEL_TYPE)


tensor_rules = no_rules(LLAMA_RENAMES)

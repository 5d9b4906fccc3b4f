"""The Hugging Face ``falcon_mamba`` checkpoint family (transformers' FalconMambaForCausalLM): Mamba
with weightless RMS norms on dt, B and C inside the mixer (``mixer_rms_eps``)."""

from __future__ import annotations

import re
from typing import Any

from zoo.hub.config_reader import ConfigReader
from zoo.hub.llama_like import no_rules
from zoo.hub.mamba_like import MAMBA_RENAMES, read_mamba, write_mamba
from zoo.specs.model import ModelSpec

MODEL_TYPE = "falcon_mamba"
ARCHITECTURE = "FalconMambaForCausalLM"
IGNORED = re.compile("$^")


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a falcon_mamba config.json."""
    return read_mamba(r, falcon=True)


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The falcon_mamba config.json computing what ``spec`` computes."""
    return write_mamba(spec, MODEL_TYPE, falcon=True)


tensor_rules = no_rules(MAMBA_RENAMES)

"""Named architectures. Each family module cites the Hugging Face config its presets follow.

This package is a plugin like any other: its hook registers every preset in PRESETS of the
family modules below.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from zoo.specs.hookspecs import hookimpl

FAMILY_MODULES: tuple[str, ...] = (
    "zoo.archs.gpt2",
    "zoo.archs.llama",
    "zoo.archs.qwen3",
    "zoo.archs.gpt_oss",
    "zoo.archs.mistral",
    "zoo.archs.gemma3",
    "zoo.archs.mamba",
    "zoo.archs.bert",
    "zoo.archs.transformer",
    "zoo.archs.modernbert",
    "zoo.archs.t5",
    "zoo.archs.bart",
    "zoo.archs.qwen3_next",
    "zoo.archs.mamba2",
    "zoo.archs.bloom",
    "zoo.archs.mpt",
    "zoo.archs.electra",
    "zoo.archs.deberta",
)


@hookimpl
def zoo_register_architectures(register: Callable[..., None]) -> None:
    for module_name in FAMILY_MODULES:
        module = importlib.import_module(module_name)
        for name, factory in module.PRESETS.items():
            register(name, factory)

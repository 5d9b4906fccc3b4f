"""Named architectures. Each family module cites the Hugging Face config its presets follow.

This package is a plugin like any other: its hook registers every preset in PRESETS of the
family modules below.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

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


def preset(name: str) -> Any:
    """The ModelSpec registered under ``name`` (built-in or from a plugin)."""
    from zoo.errors import PluginError, SpecError
    from zoo.specs.model import ModelSpec
    from zoo.specs.registry import get_registry

    entry = get_registry().architecture(name)
    source = entry.source
    where = f"architecture {name!r} of plugin {entry.plugin!r}"
    if callable(source) and not isinstance(source, ModelSpec):
        try:
            source = source()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the plugin's bug: one error naming it, never a traceback
            message = " ".join(str(exc).split())[:300]
            raise PluginError(f"{where}: its factory raised {type(exc).__name__}: {message}") from None
    try:
        spec = ModelSpec.model_validate(source)
    except SpecError as exc:
        raise PluginError(f"{where} is not a valid spec: {exc}") from None
    return spec if spec.name else spec.override({"name": name})


@hookimpl
def zoo_register_architectures(register: Callable[..., None]) -> None:
    for module_name in FAMILY_MODULES:
        module = importlib.import_module(module_name)
        for name, factory in module.PRESETS.items():
            register(name, factory)

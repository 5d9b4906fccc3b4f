"""The built-in Hugging Face checkpoint families: one module per ``model_type``, each module
itself a ``zoo.hub.family.CheckpointFamily``.

This package is a plugin like any other (``zoo.specs.registry.BUILTIN_PLUGINS``): its hook
registers every module in it, so a new family is one new file here, reached (as a plugin's
family is) only through the registry. What several families share lives beside the package
(``zoo.hub.llama_like``, ``zoo.hub.bert_like``, ``zoo.hub.mamba_like``, ``zoo.hub.names``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from zoo.hub.config import spec_from_hf_config
from zoo.specs.hookspecs import hookimpl


def builtin_checkpoint_families() -> list[str]:
    """The module name of every built-in family, in name order (``save_pretrained`` tries them
    in this order when no model_type is given)."""
    return sorted(f"{__name__}.{info.name}" for info in pkgutil.iter_modules(__path__) if not info.ispkg)


@hookimpl
def zoo_register_checkpoint_formats(register: Callable[..., None]) -> None:
    for name in builtin_checkpoint_families():
        register(importlib.import_module(name))


@hookimpl
def zoo_register_spec_readers(register: Callable[..., None]) -> None:
    register("hf_config", spec_from_hf_config)

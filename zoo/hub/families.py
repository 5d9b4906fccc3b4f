"""Hugging Face families that live in a module of their own (one file per family: config
both ways, tensor names, checkpoint tensors to skip), and the dispatch over them.

Built in: ``FAMILY_MODULES`` (modernbert, t5, bart). Plugins add families through the hook
``zoo_register_checkpoint_formats`` (``zoo.hub.family.CheckpointFamily``); ``family_module``
answers both, so ``zoo.hub.config``, ``zoo.hub.save``, the loader and ``save_pretrained``
treat a plugin's model_type as a built-in one. ``tensor_rules`` / ``ignored_tensor`` fall
back to ``zoo.hub.names`` for the families defined there.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import ModuleType
from typing import Any

import torch

from zoo.errors import CheckpointError, PluginConflictError
from zoo.hub import bart, modernbert, t5
from zoo.hub import names
from zoo.hub.names import Rule, rename

FAMILY_MODULES: dict[str, ModuleType] = {module.MODEL_TYPE: module for module in (modernbert, t5, bart)}


def plugin_families() -> dict[str, Any]:
    """model_type -> the CheckpointFamily a plugin registered (the registry is built if needed)."""
    from zoo.registry import get_registry  # the registry imports plugins: only when asked

    return {model_type: entry.family for model_type, entry in get_registry().checkpoint_formats.items()}


def family_module(model_type: str) -> Any | None:
    """The family object for ``model_type``: a plugin's, else a built-in module, else None
    (the families of ``zoo.hub.names`` / ``zoo.hub.config``). A model type zoo reads itself
    is taken over by a plugin only with ``override=True``."""
    from zoo.hub.config import FAMILIES  # the built-in readers (zoo.hub.config imports this module)
    from zoo.registry import get_registry

    entry = get_registry().checkpoint_formats.get(model_type)
    if entry is not None:
        if entry.override or model_type not in FAMILIES:
            return entry.family
        raise PluginConflictError(
            f"checkpoint format {model_type!r} is built into zoo and plugin {entry.plugin!r} registers it "
            "without override=True; pass override=True to replace it, or leave the plugin out with ZOO_PLUGINS"
        )
    return FAMILY_MODULES.get(model_type)


def tensor_rules(model_type: str, zoo_shapes: Mapping[str, torch.Size], hf_keys: Collection[str]) -> list[Rule]:
    """Every zoo parameter's rule for this family; a parameter no rule covers is an error."""
    module = family_module(model_type)
    if module is None:
        return names.tensor_rules(model_type, zoo_shapes, hf_keys)
    rules, renames = module.tensor_rules(list(zoo_shapes), hf_keys)
    claimed = {n for rule in rules for n in rule.zoo}
    for name in zoo_shapes:
        if name in claimed:
            continue
        target = names.renamed(name, renames)
        if target is None:
            raise CheckpointError(f"zoo parameter {name!r} has no counterpart in a {model_type} checkpoint")
        rules.append(rename(name, target))
    return rules


def ignored_tensor(model_type: str, name: str) -> bool:
    """A checkpoint tensor that is no weight of zoo's model for this family."""
    module = family_module(model_type)
    if module is None:
        return names.ignored_tensor(model_type, name)
    return names.IGNORED_HF.match(name) is not None or bool(module.IGNORED.match(name))

"""Hugging Face families that live in a module of their own (one file per family: config
both ways, tensor names, checkpoint tensors to skip), and the dispatch over them.

``zoo.hub.config`` and ``zoo.hub.save`` read ``FAMILY_MODULES``; the loader and
``save_pretrained`` ask ``tensor_rules`` / ``ignored_tensor`` here, which fall back to
``zoo.hub.names`` for the families defined there.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import ModuleType

import torch

from zoo.errors import CheckpointError
from zoo.hub import bart, modernbert, t5
from zoo.hub import names
from zoo.hub.names import Rule, rename

FAMILY_MODULES: dict[str, ModuleType] = {module.MODEL_TYPE: module for module in (modernbert, t5, bart)}


def tensor_rules(model_type: str, zoo_shapes: Mapping[str, torch.Size], hf_keys: Collection[str]) -> list[Rule]:
    """Every zoo parameter's rule for this family; a parameter no rule covers is an error."""
    module = FAMILY_MODULES.get(model_type)
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
    module = FAMILY_MODULES.get(model_type)
    if module is None:
        return names.ignored_tensor(model_type, name)
    return names.IGNORED_HF.match(name) is not None or bool(module.IGNORED.match(name))

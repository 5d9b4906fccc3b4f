"""Hugging Face families that live in a module of their own (one file per family: config
both ways, tensor names, checkpoint tensors to skip), and the dispatch over them.

Built in: ``FAMILY_MODULES`` (modernbert, t5, bart). Plugins add families through the hook
``zoo_register_checkpoint_formats`` (``zoo.hub.family.CheckpointFamily``); ``family_module``
(in ``zoo.hub.config``, which knows the built-in readers a plugin may not take over silently)
answers both, so the config reader, the loader and ``save_pretrained`` treat a plugin's
model_type as a built-in one. ``tensor_rules`` / ``ignored_tensor`` fall
back to ``zoo.hub.names`` for the families defined there.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

import torch

from zoo.errors import CheckpointError
from zoo.hub import names
from zoo.hub.config import FAMILY_MODULES, family_module, plugin_families  # noqa: F401 - re-exported
from zoo.hub.family import ZooNames
from zoo.hub.names import Rule, rename

if TYPE_CHECKING:
    from zoo.specs.model import ModelSpec

def tensor_rules(
    model_type: str, zoo_shapes: Mapping[str, torch.Size], hf_keys: Collection[str], spec: ModelSpec | None = None
) -> list[Rule]:
    """Every zoo parameter's rule for this family; a parameter no rule covers is an error.
    ``spec``: the model's spec, handed to the family with the names (``ZooNames``)."""
    module = family_module(model_type)
    if module is None:
        return names.tensor_rules(model_type, zoo_shapes, hf_keys)
    rules, renames = module.tensor_rules(ZooNames(list(zoo_shapes), spec), hf_keys)
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

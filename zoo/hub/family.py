"""The public contract of a Hugging Face checkpoint family, for plugins.

Every checkpoint family, built-in or a plugin's, is one object with this protocol registered
through the hook ``zoo_register_checkpoint_formats(register)`` (``register(family,
override=False)``); ``zoo.from_pretrained``, ``ModelSpec.from_hf_config`` and
``save_pretrained`` reach a family only through the registry (``zoo.hub.config.checkpoint_family``).
The built-in ones are the modules of ``zoo.hub.families`` (one file per ``model_type``,
registered by that package's hook); a plugin that brings a new block (RWKV, say) brings its
family the same way. A module with these names is such an object. A built-in model_type is
taken over only with ``override=True``; a clash is an error naming both plugins.

The registry checks a registered family against ``FAMILY_MEMBERS`` of
``zoo.specs.registry_entries`` (the contract layer, which imports no hub); this protocol is
the typed form of those members for plugin authors.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any, Protocol, runtime_checkable

import torch

from zoo.errors import CheckpointError
from zoo.hub.config_reader import ConfigReader, layer_selector
from zoo.hub.names import IGNORED_HF, Rule, rename, renamed
from zoo.specs.model import ModelSpec

__all__ = ["CheckpointFamily", "ConfigReader", "ZooShapes", "layer_selector"]


@runtime_checkable
class CheckpointFamily(Protocol):
    """One Hugging Face ``model_type``: config.json both ways and tensor names.

    - ``MODEL_TYPE``: the config's ``model_type`` (``"rwkv"``).
    - ``ARCHITECTURE``: what ``save_pretrained`` writes in ``architectures`` (a family with
      several heads, BERT's pooler or masked-LM one, writes ``architectures`` itself in
      ``write_config`` for the head the spec has; ``ARCHITECTURE`` is then its base model).
    - ``IGNORED``: checkpoint tensors that are no weight of zoo's model (``re.compile("$^")``
      for none).
    - ``read_config(reader) -> dict``: the spec dict (``ModelSpec`` form) of a config. Read
      keys through ``reader.get/need/expect`` and tick keys that cannot change the forward
      pass with ``reader.used.update(...)``: any key left unread is an error naming it.
    - ``write_config(spec) -> dict``: the config.json computing what ``spec`` computes
      (zoo reads it back and refuses to save when the spec differs). A spec the config cannot
      describe is a ``zoo.errors.CheckpointError`` (``save_pretrained`` then tries the next
      family); any other exception is a bug and propagates.
    - ``tensor_rules(zoo_names, hf_keys) -> (rules, renames)``: ``zoo_names`` maps each zoo
      parameter's name to its shape (iterate it for the names), ``hf_keys`` are the
      checkpoint's tensor names (empty when saving). ``rules`` are
      ``zoo.hub.names.Rule`` for tensors that are split or reshaped (may be empty);
      ``renames`` are ``(regex on the zoo name, replacement)`` pairs for the rest.
      ``zoo_names`` is a ``ZooShapes``: its ``spec`` is the model's spec, for layouts that
      depend on its numbers (BLOOM's fused qkv interleaves q, k and v head by head).
    """

    MODEL_TYPE: str
    ARCHITECTURE: str
    IGNORED: re.Pattern[str]

    def read_config(self, reader: ConfigReader) -> dict[str, Any]: ...

    def write_config(self, spec: ModelSpec) -> dict[str, Any]: ...

    def tensor_rules(
        self, zoo_names: Collection[str], hf_keys: Collection[str]
    ) -> tuple[list[Rule], list[tuple[str, str]]]: ...


class ZooShapes(dict):  # type: ignore[type-arg]
    """A zoo model's parameter names and shapes (``name -> torch.Size``), with the spec they
    belong to: names and shapes alone do not say how a fused checkpoint tensor splits when
    the split depends on the head count (BLOOM's ``query_key_value`` rows are
    [heads, 3, head_dim])."""

    def __init__(self, shapes: Mapping[str, Any], spec: ModelSpec) -> None:
        super().__init__(shapes)
        self.spec = spec


# ---- a family's plan, completed ----------------------------------------------------------
def tensor_rules(
    family: CheckpointFamily, zoo_shapes: Mapping[str, torch.Size], hf_keys: Collection[str]
) -> list[Rule]:
    """Every zoo parameter's rule for this family: the family's own rules, then its renames
    for the rest; a parameter neither covers is an error."""
    rules, renames = family.tensor_rules(zoo_shapes, hf_keys)
    rules = list(rules)
    claimed = {n for rule in rules for n in rule.zoo}
    for name in zoo_shapes:
        if name in claimed:
            continue
        target = renamed(name, renames)
        if target is None:
            raise CheckpointError(f"zoo parameter {name!r} has no counterpart in a {family.MODEL_TYPE} checkpoint")
        rules.append(rename(name, target))
    return rules


def ignored_tensor(family: CheckpointFamily, name: str) -> bool:
    """A checkpoint tensor that is no weight of zoo's model for this family."""
    return IGNORED_HF.match(name) is not None or family.IGNORED.match(name) is not None

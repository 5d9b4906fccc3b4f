"""The public contract of a Hugging Face checkpoint family, for plugins.

A plugin that brings a new block (RWKV, say) also brings its checkpoint format: it
registers an object with this protocol through the hook
``zoo_register_checkpoint_formats(register)`` (``register(family, override=False)``), and
``zoo.from_pretrained``, ``ModelSpec.from_hf_config`` and ``save_pretrained`` then handle
its ``model_type`` as they handle the built-in families (``zoo.hub.families.modernbert``, ``t5``,
``bart`` have the same shape). A module with these names is such an object.

This module imports no other part of zoo at run time beyond ``zoo.errors`` and the config
reader, so the registry can check a family while plugins load without an import cycle.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

from zoo.hub.config_reader import ConfigReader, layer_selector

if TYPE_CHECKING:
    from zoo.hub.names import Rule
    from zoo.specs.model import ModelSpec

__all__ = ["FAMILY_MEMBERS", "CheckpointFamily", "ConfigReader", "ZooNames", "layer_selector", "missing_members"]


@runtime_checkable
class CheckpointFamily(Protocol):
    """One Hugging Face ``model_type``: config.json both ways and tensor names.

    - ``MODEL_TYPE``: the config's ``model_type`` (``"rwkv"``).
    - ``ARCHITECTURE``: what ``save_pretrained`` writes in ``architectures``.
    - ``IGNORED``: checkpoint tensors that are no weight of zoo's model (``re.compile("$^")``
      for none).
    - ``read_config(reader) -> dict``: the spec dict (``ModelSpec`` form) of a config. Read
      keys through ``reader.get/need/expect`` and tick keys that cannot change the forward
      pass with ``reader.used.update(...)``: any key left unread is an error naming it.
    - ``write_config(spec) -> dict``: the config.json computing what ``spec`` computes
      (zoo reads it back and refuses to save when the spec differs).
    - ``tensor_rules(zoo_names, hf_keys) -> (rules, renames)``: ``rules`` are
      ``zoo.hub.names.Rule`` for tensors that are split or reshaped (may be empty);
      ``renames`` are ``(regex on the zoo name, replacement)`` pairs for the rest.
      ``zoo_names`` is a ``ZooNames``: its ``spec`` is the model's spec, for layouts that
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


class ZooNames(tuple[str, ...]):
    """A zoo model's tensor names, with the spec they belong to.

    Names alone do not say how a fused checkpoint tensor splits when the split depends on
    the head count (BLOOM's ``query_key_value`` rows are [heads, 3, head_dim]); ``spec``
    carries it without changing the ``tensor_rules`` signature families already implement.
    """

    spec: ModelSpec | None

    def __new__(cls, names: Collection[str], spec: ModelSpec | None = None) -> Self:
        new = super().__new__(cls, names)
        new.spec = spec
        return new


FAMILY_MEMBERS: tuple[str, ...] = ("MODEL_TYPE", "ARCHITECTURE", "IGNORED", "read_config", "write_config", "tensor_rules")


def missing_members(family: object) -> list[str]:
    """What ``family`` lacks of the protocol (wrongly typed members included); [] when complete."""
    problems = [name for name in FAMILY_MEMBERS if not hasattr(family, name)]
    if problems:
        return problems
    if not isinstance(getattr(family, "MODEL_TYPE"), str) or not getattr(family, "MODEL_TYPE"):
        problems.append("MODEL_TYPE (a non-empty string)")
    if not isinstance(getattr(family, "ARCHITECTURE"), str):
        problems.append("ARCHITECTURE (a string)")
    if not isinstance(getattr(family, "IGNORED"), re.Pattern):
        problems.append("IGNORED (a compiled regular expression)")
    problems += [f"{name} (callable)" for name in FAMILY_MEMBERS[3:] if not callable(getattr(family, name))]
    return problems

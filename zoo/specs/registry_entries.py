"""What one registration is, and its checks: a component kind (family, kind, factory,
options model, the module class it declares) or a named architecture.

A wrong registration is the plugin's bug and a ``PluginError`` naming the plugin, family
and kind, raised when the plugin registers, before anything is built.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from zoo.errors import PluginError, allowed, did_you_mean

FAMILIES: tuple[str, ...] = ("norm", "positional", "attention", "ffn", "block", "embedding", "head")
# families whose modules need no declared class (plain nn.Module is all they promise)
OPTIONAL_MODULE_FAMILIES: frozenset[str] = frozenset({"norm"})

@dataclass(frozen=True)
class ComponentEntry:
    """One registered kind: how to validate its options and how to build it."""

    family: str
    kind: str
    factory: Callable[..., Any]
    options: type[BaseModel]
    plugin: str
    doc: str = ""
    override: bool = False  # registered with override=True
    replaces: str | None = None  # the plugin whose kind this one replaced
    module: type | None = None  # the class the factory builds (its capabilities), checked at registration


@dataclass(frozen=True)
class ArchitectureEntry:
    name: str
    source: Any  # ModelSpec, dict, or zero-argument callable returning either
    plugin: str
    override: bool = False
    replaces: str | None = None


def component_entry(
    family: str,
    kind: str,
    factory: Callable[..., Any],
    options: type[BaseModel] | None,
    override: bool,
    plugin: str,
    module: type | None = None,
) -> ComponentEntry:
    """Validate one component registration (wrong arguments are the plugin's bug)."""
    from zoo.specs.interfaces import Options  # torch: only once something registers

    if family not in FAMILIES:
        raise PluginError(
            f"plugin {plugin!r} registers unknown family {family!r}{did_you_mean(str(family), FAMILIES)}; "
            f"allowed: {allowed(FAMILIES)}"
        )
    if not isinstance(kind, str) or not kind:
        raise PluginError(f"plugin {plugin!r}: {family} kind must be a non-empty string, got {kind!r}")
    if not callable(factory):
        raise PluginError(f"plugin {plugin!r}: factory of {family} kind {kind!r} is not callable: {factory!r}")
    options = Options if options is None else options
    if not (isinstance(options, type) and issubclass(options, Options)):
        raise PluginError(
            f"plugin {plugin!r}: options of {family} kind {kind!r} must be a subclass of zoo.specs.interfaces.Options, "
            f"got {options!r}"
        )
    for option, leader in options.follows.items():  # an option tied to another: both must exist
        if option not in options.model_fields or leader not in options.model_fields:
            raise PluginError(
                f"plugin {plugin!r}: {family} kind {kind!r} declares follows {{{option!r}: {leader!r}}}, "
                f"but both must be options of {options.__name__}; allowed: {allowed(options.model_fields)}"
            )
    unknown = sorted(set(options.tiny) - set(options.model_fields))
    if unknown:
        raise PluginError(
            f"plugin {plugin!r}: {family} kind {kind!r} declares tiny values for {', '.join(unknown)}, "
            f"which are not options of {options.__name__}; allowed: {allowed(options.model_fields)}"
        )
    module = checked_module(family, kind, module, plugin)
    doc = (factory.__doc__ or "").strip().splitlines()[0] if (factory.__doc__ or "").strip() else ""
    return ComponentEntry(family, kind, factory, options, plugin, doc, bool(override), module=module)


def checked_module(family: str, kind: str, module: type | None, plugin: str) -> type:
    """The declared module class, after checking it subclasses the family's base and
    implements every abstract member (``score_flops`` of a token mixer, ...)."""
    from zoo.specs.interfaces import FAMILY_BASES

    base = FAMILY_BASES[family]
    where = f"plugin {plugin!r}: {family} kind {kind!r}"
    if module is None:
        if family in OPTIONAL_MODULE_FAMILIES:
            return base
        raise PluginError(
            f"{where} declares no module class; pass module=YourClass (a subclass of "
            f"zoo.specs.interfaces.{base.__name__}) so its capabilities are checked at registration"
        )
    if not (isinstance(module, type) and issubclass(module, base)):
        raise PluginError(f"{where}: module={module!r} must be a subclass of {base.__module__}.{base.__qualname__}")
    missing = sorted(getattr(module, "__abstractmethods__", ()))
    if inspect.isabstract(module) and missing:
        raise PluginError(f"{where}: {module.__name__} does not implement {', '.join(missing)} (required by {base.__name__})")
    return module


def architecture_entry(name: str, source: Any, override: bool, plugin: str) -> ArchitectureEntry:
    if not isinstance(name, str) or not name:
        raise PluginError(f"plugin {plugin!r}: architecture name must be a non-empty string, got {name!r}")
    return ArchitectureEntry(name, source, plugin, bool(override))


@dataclass(frozen=True)
class CheckpointFormatEntry:
    """A Hugging Face checkpoint family a plugin registered (``zoo.hub.family.CheckpointFamily``)."""

    model_type: str
    family: Any  # a CheckpointFamily: a module or object with its members
    plugin: str
    override: bool = False
    replaces: str | None = None


def checkpoint_format_entry(family: Any, override: bool, plugin: str) -> CheckpointFormatEntry:
    """Validate one checkpoint-format registration: every member of the protocol, typed."""
    from zoo.hub.family import missing_members  # the hub: only once something registers a format

    missing = missing_members(family)
    if missing:
        raise PluginError(
            f"plugin {plugin!r}: checkpoint format {family!r} lacks {', '.join(missing)} "
            "(see zoo.hub.family.CheckpointFamily)"
        )
    return CheckpointFormatEntry(family.MODEL_TYPE, family, plugin, bool(override))

"""What one registration is, and its checks: a component kind (slot, kind, factory,
options model, the module class it declares) or a named architecture.

A wrong registration is the plugin's bug and a ``PluginError`` naming the plugin, slot
and kind, raised when the plugin registers, before anything is built.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from torch import nn

from zoo.errors import PluginError, allowed, did_you_mean
from zoo.specs.interfaces import SLOT_BASES
from zoo.specs.options import Options
from zoo.specs.state import HoldsState

# the component slots a spec fills; a kind registers into one of them
SLOTS: tuple[str, ...] = ("norm", "positional", "attention", "cross_attention", "ffn", "block", "embedding", "head")
# slots whose modules need no declared class (a plain nn.Module is all they promise)
OPTIONAL_MODULE_SLOTS: frozenset[str] = frozenset({"norm"})


@dataclass(frozen=True)
class ComponentEntry:
    """One registered kind: how to validate its options and how to build it."""

    slot: str
    kind: str
    factory: Callable[..., Any]
    options: type[Options]
    plugin: str
    module: type[nn.Module]  # the class the factory builds (its capabilities), checked at registration
    doc: str = ""
    override: bool = False  # registered with override=True
    replaces: str | None = None  # the plugin whose kind this one replaced


@dataclass(frozen=True)
class ArchitectureEntry:
    name: str
    source: Any  # ModelSpec, dict, or zero-argument callable returning either
    plugin: str
    override: bool = False
    replaces: str | None = None


def component_entry(
    slot: str,
    kind: str,
    factory: Callable[..., Any],
    options: type[BaseModel] | None,
    override: bool,
    plugin: str,
    module: type | None = None,
) -> ComponentEntry:
    """Validate one component registration (wrong arguments are the plugin's bug)."""
    if slot not in SLOTS:
        raise PluginError(
            f"plugin {plugin!r} registers unknown slot {slot!r}{did_you_mean(str(slot), SLOTS)}; "
            f"allowed: {allowed(SLOTS)}"
        )
    if not isinstance(kind, str) or not kind:
        raise PluginError(f"plugin {plugin!r}: {slot} kind must be a non-empty string, got {kind!r}")
    if not callable(factory):
        raise PluginError(f"plugin {plugin!r}: factory of {slot} kind {kind!r} is not callable: {factory!r}")
    options = Options if options is None else options
    if not (isinstance(options, type) and issubclass(options, Options)):
        raise PluginError(
            f"plugin {plugin!r}: options of {slot} kind {kind!r} must be a subclass of zoo.parts.Options, "
            f"got {options!r}"
        )
    for option, leader in options.follows.items():  # an option tied to another: both must exist
        if option not in options.model_fields or leader not in options.model_fields:
            raise PluginError(
                f"plugin {plugin!r}: {slot} kind {kind!r} declares follows {{{option!r}: {leader!r}}}, "
                f"but both must be options of {options.__name__}; allowed: {allowed(options.model_fields)}"
            )
    unknown = sorted(set(options.tiny) - set(options.model_fields))
    if unknown:
        raise PluginError(
            f"plugin {plugin!r}: {slot} kind {kind!r} declares tiny values for {', '.join(unknown)}, "
            f"which are not options of {options.__name__}; allowed: {allowed(options.model_fields)}"
        )
    declared = checked_module(slot, kind, module, plugin)
    doc = (factory.__doc__ or "").strip().splitlines()[0] if (factory.__doc__ or "").strip() else ""
    return ComponentEntry(slot, kind, factory, options, plugin, declared, doc, bool(override))


# capabilities a slot's base declares as ClassVars: each must stay a bool in a subclass
CAPABILITIES: dict[str, tuple[str, ...]] = {
    "attention": ("stateful", "bidirectional"),
    "cross_attention": ("stateful",),
    "ffn": ("stateful",),
    "block": ("takes_cross_attention", "feeds_ffn_state"),
}


def checked_module(slot: str, kind: str, module: type | None, plugin: str) -> type[nn.Module]:
    """The declared module class, after checking it subclasses the slot's base, implements
    every abstract member (``score_flops`` of a token mixer, ...) and declares its
    capabilities consistently (a ``stateful`` part declares its ``state_layout``)."""
    base = SLOT_BASES[slot]
    where = f"plugin {plugin!r}: {slot} kind {kind!r}"
    if module is None:
        if slot in OPTIONAL_MODULE_SLOTS:
            return base
        raise PluginError(
            f"{where} declares no module class; pass module=YourClass (a subclass of "
            f"zoo.parts.{base.__name__}) so its capabilities are checked at registration"
        )
    if not (isinstance(module, type) and issubclass(module, base)):
        raise PluginError(f"{where}: module={module!r} must be a subclass of zoo.parts.{base.__qualname__}")
    missing = sorted(module.__abstractmethods__) if inspect.isabstract(module) else []
    if missing:
        raise PluginError(
            f"{where}: {module.__name__} does not implement {', '.join(missing)} (required by {base.__name__})"
        )
    for capability in CAPABILITIES.get(slot, ()):
        value = inspect.getattr_static(module, capability)
        if not isinstance(value, bool):
            raise PluginError(f"{where}: {module.__name__}.{capability} must be a bool ClassVar, got {value!r}")
    if issubclass(module, HoldsState) and module.stateful and module.state_layout is HoldsState.state_layout:
        raise PluginError(f"{where}: {module.__name__} declares stateful = True but no state_layout")
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


# what a checkpoint family must have (``zoo.hub.family.CheckpointFamily`` types them for plugins)
FAMILY_MEMBERS: tuple[str, ...] = (
    "MODEL_TYPE",
    "ARCHITECTURE",
    "IGNORED",
    "read_config",
    "write_config",
    "tensor_rules",
)


def missing_members(family: object) -> list[str]:
    """What ``family`` lacks of the protocol (wrongly typed members included); [] when complete."""
    problems = [name for name in FAMILY_MEMBERS if not hasattr(family, name)]
    if problems:
        return problems
    if not isinstance(family.MODEL_TYPE, str) or not family.MODEL_TYPE:
        problems.append("MODEL_TYPE (a non-empty string)")
    if not isinstance(family.ARCHITECTURE, str):
        problems.append("ARCHITECTURE (a string)")
    if not isinstance(family.IGNORED, re.Pattern):
        problems.append("IGNORED (a compiled regular expression)")
    problems += [f"{name} (callable)" for name in FAMILY_MEMBERS[3:] if not callable(getattr(family, name))]
    return problems


def checkpoint_format_entry(family: Any, override: bool, plugin: str) -> CheckpointFormatEntry:
    """Validate one checkpoint-format registration: every member of the protocol, typed."""
    missing = missing_members(family)
    if missing:
        raise PluginError(
            f"plugin {plugin!r}: checkpoint format {family!r} lacks {', '.join(missing)} "
            "(see zoo.hub.family.CheckpointFamily)"
        )
    return CheckpointFormatEntry(family.MODEL_TYPE, family, plugin, bool(override))


@dataclass(frozen=True)
class SpecReaderEntry:
    """A reader of one config format into a ModelSpec (``"hf_config"``: a Hugging Face
    config.json), registered by the plugin that knows the format (the hub's families)."""

    fmt: str
    reader: Callable[..., Any]
    plugin: str
    override: bool = False
    replaces: str | None = None


def spec_reader_entry(fmt: str, reader: Callable[..., Any], override: bool, plugin: str) -> SpecReaderEntry:
    if not isinstance(fmt, str) or not fmt:
        raise PluginError(f"plugin {plugin!r}: a spec reader's format must be a non-empty string, got {fmt!r}")
    if not callable(reader):
        raise PluginError(f"plugin {plugin!r}: spec reader {fmt!r} is not callable: {reader!r}")
    return SpecReaderEntry(fmt, reader, plugin, bool(override))


@dataclass
class Staged:
    """What one plugin's hooks asked to register, before any of it is applied."""

    components: list[ComponentEntry] = field(default_factory=list)
    architectures: list[ArchitectureEntry] = field(default_factory=list)
    formats: list[CheckpointFormatEntry] = field(default_factory=list)
    readers: list[SpecReaderEntry] = field(default_factory=list)


def refuse_twice(staged: Staged, name: str) -> None:
    """A plugin that registers one name twice is broken (which one would it mean?): refused
    whole, so it is reported and skipped like a plugin that fails to import."""
    keys = [
        *(f"{c.slot} kind {c.kind!r}" for c in staged.components),
        *(f"architecture {a.name!r}" for a in staged.architectures),
    ]  # formats: PluginConflictError above
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            raise PluginError(f"plugin {name!r}: registers {key} twice; register each name once")
        seen.add(key)

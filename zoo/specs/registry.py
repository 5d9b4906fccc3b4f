"""The registry: component kinds and named architectures, filled by pluggy plugins.

Built-in components (``zoo.components.*``) and presets (``zoo.archs``) are plugins like any
other; third-party ones arrive through the ``zoo`` entry-point group (see
``zoo.specs.plugins``) or ``zoo.register_plugin`` at run time. The registry is built once,
lazily, on first use, so ``import zoo`` and ``zoo --help`` import neither torch nor plugins.

A plugin's registrations are collected first and applied all together, so a plugin that
raises half way, or clashes with another, leaves the registry as it was.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

import pluggy
from pydantic import BaseModel

from zoo import __version__ as zoo_version
from zoo.errors import PluginConflictError, PluginError, SpecError, allowed, did_you_mean
from zoo.specs import hookspecs
from zoo.specs.plugins import PluginFailure, load_entry_points
from zoo.specs.registry_entries import (
    ArchitectureEntry,
    CheckpointFormatEntry,
    ComponentEntry,
    SpecReaderEntry,
    Staged,
    architecture_entry,
    checkpoint_format_entry,
    component_entry,
    refuse_twice,
    spec_reader_entry,
)

BUILTIN_PLUGINS: tuple[str, ...] = (
    "zoo.components.norms",
    "zoo.components.positional",
    "zoo.components.relative_position",
    "zoo.components.attention",
    "zoo.components.cross_attention",
    "zoo.components.ffn",
    "zoo.components.moe",
    "zoo.components.blocks",
    "zoo.components.mamba",
    "zoo.components.linear_attention",
    "zoo.components.infini_attention",
    "zoo.components.embeddings",
    "zoo.components.heads",
    "zoo.components.discriminator_head",
    "zoo.components.disentangled_position",
    "zoo.components.disentangled_attention",
    "zoo.components.gated_deltanet",
    "zoo.components.mamba2",
    "zoo.archs",
    "zoo.hub.families",
)
HOOK_NAMES: tuple[str, ...] = (
    "zoo_register_components",
    "zoo_register_architectures",
    "zoo_register_checkpoint_formats",
    "zoo_register_spec_readers",
)
PluginSource = Literal["builtin", "entry point", "runtime"]


@dataclass(frozen=True)
class PluginInfo:
    """A loaded plugin and what it registered (kinds another plugin replaced included)."""

    name: str
    version: str
    source: PluginSource
    distribution: str = ""  # the installed distribution declaring the entry point
    components: tuple[tuple[str, str], ...] = ()  # (slot, kind)
    architectures: tuple[str, ...] = ()
    checkpoint_formats: tuple[str, ...] = ()  # Hugging Face model_types
    spec_readers: tuple[str, ...] = ()  # config formats read into a ModelSpec

    def describe(self) -> str:
        """How error messages name this plugin: 'name' (distribution version)."""
        if self.source == "builtin":
            return f"{self.name!r} (built in)"
        origin = " ".join(part for part in (self.distribution, self.version) if part)
        return f"{self.name!r} ({origin})" if self.distribution else repr(self.name)


@dataclass
class Registry:
    components: dict[tuple[str, str], ComponentEntry] = field(default_factory=dict)
    architectures: dict[str, ArchitectureEntry] = field(default_factory=dict)
    checkpoint_formats: dict[str, CheckpointFormatEntry] = field(default_factory=dict)  # model_type ->
    spec_readers: dict[str, SpecReaderEntry] = field(default_factory=dict)  # config format ->
    failures: list[PluginFailure] = field(default_factory=list)
    plugins: dict[str, PluginInfo] = field(default_factory=dict)
    manager: pluggy.PluginManager = field(default_factory=lambda: _new_manager())

    # ---- registration -------------------------------------------------------------------
    def register_component(
        self,
        slot: str,
        kind: str,
        factory: Callable[..., Any],
        options: type[BaseModel] | None = None,
        *,
        override: bool = False,
        plugin: str = "<direct>",
        module: type | None = None,
    ) -> None:
        staged = Staged(components=[component_entry(slot, kind, factory, options, override, plugin, module)])
        self._apply(staged)

    def register_architecture(
        self, name: str, source: Any, *, override: bool = False, plugin: str = "<direct>"
    ) -> None:
        self._apply(Staged(architectures=[architecture_entry(name, source, override, plugin)]))

    def _apply(self, staged: Staged) -> None:
        """Check every registration against what is there, then apply them all (or none)."""
        components: dict[tuple[str, str], ComponentEntry] = {}
        for entry in staged.components:
            key = (entry.slot, entry.kind)
            winner = self._resolve(f"{entry.slot} kind {entry.kind!r}", self.components.get(key), entry)
            if winner is not None:
                components[key] = winner
        architectures: dict[str, ArchitectureEntry] = {}
        for arch in staged.architectures:
            winner = self._resolve(f"architecture {arch.name!r}", self.architectures.get(arch.name), arch)
            if winner is not None:
                architectures[arch.name] = winner
        formats: dict[str, CheckpointFormatEntry] = {}
        seen: dict[str, CheckpointFormatEntry] = {}
        for fmt in staged.formats:
            if fmt.model_type in seen:
                raise PluginConflictError(
                    f"checkpoint format {fmt.model_type!r} is registered twice by {self._describe(fmt.plugin)}: "
                    f"{seen[fmt.model_type].family!r} and {fmt.family!r}; register each model_type once"
                )
            seen[fmt.model_type] = fmt
            winner = self._resolve(
                f"checkpoint format {fmt.model_type!r}", self.checkpoint_formats.get(fmt.model_type), fmt
            )
            if winner is not None:
                formats[fmt.model_type] = winner
        readers: dict[str, SpecReaderEntry] = {}
        for reader in staged.readers:
            winner = self._resolve(f"spec reader {reader.fmt!r}", self.spec_readers.get(reader.fmt), reader)
            if winner is not None:
                readers[reader.fmt] = winner
        self.components.update(components)
        self.architectures.update(architectures)
        self.checkpoint_formats.update(formats)
        self.spec_readers.update(readers)

    def _resolve(self, what: str, existing: Any, new: Any) -> Any:
        """The entry to store for a name both may claim, None to keep the existing one.

        The plugin that asked to override wins whichever loaded first; two plugins that
        both, or neither, asked are an error naming both.
        """
        if existing is None or existing.plugin == new.plugin:
            return new
        if new.override and not existing.override:
            return _replacing(new, existing.plugin)
        if existing.override and not new.override:
            return None
        both = "both ask to override it" if new.override else "neither asks to override"
        raise PluginConflictError(
            f"{what} is registered by both {self._describe(existing.plugin)} and {self._describe(new.plugin)} "
            f"and {both}; pass override=True in exactly one of them, or choose plugins with "
            "ZOO_PLUGINS (a comma list of plugin names)"
        )

    def _describe(self, plugin: str) -> str:
        info = self.plugins.get(plugin)
        return info.describe() if info is not None else repr(plugin)

    # ---- lookup ---------------------------------------------------------------------------
    def kinds(self, slot: str) -> list[str]:
        return sorted(kind for registered, kind in self.components if registered == slot)

    def component(self, slot: str, kind: str, *, path: str | None = None) -> ComponentEntry:
        entry = self.components.get((slot, kind))
        if entry is None:
            where = path or f"{slot}.kind"
            kinds = self.kinds(slot)
            raise SpecError(
                f"{where}: unknown {slot} kind {kind!r}{did_you_mean(str(kind), kinds)}; allowed: {allowed(kinds)}"
            )
        return entry

    def architecture(self, name: str) -> ArchitectureEntry:
        entry = self.architectures.get(name)
        if entry is None:
            names = sorted(self.architectures)
            raise SpecError(f"unknown architecture {name!r}{did_you_mean(name, names)}; allowed: {allowed(names)}")
        return entry

    def spec_reader(self, fmt: str) -> Callable[..., Any]:
        """The function turning a config of format ``fmt`` into a ModelSpec."""
        entry = self.spec_readers.get(fmt)
        if entry is None:
            raise SpecError(
                f"unknown config format {fmt!r}{did_you_mean(fmt, self.spec_readers)}; "
                f"allowed: {allowed(self.spec_readers)}"
            )
        return entry.reader

    # ---- plugins --------------------------------------------------------------------------
    def add_plugin(
        self,
        plugin: object,
        name: str | None = None,
        version: str = "",
        *,
        source: PluginSource = "runtime",
        distribution: str = "",
    ) -> str:
        """Register a plugin module or object and apply what its hooks register.

        Raises PluginError when the plugin has no hooks, its hooks raise, or what it
        registers clashes with another plugin; the registry is then unchanged.
        """
        name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        if self.manager.is_registered(plugin) and self.manager.get_name(plugin) == name:
            return name
        if name in self.plugins:
            raise PluginError(f"plugin name {name!r} is already taken by {self.plugins[name].describe()}")
        info = PluginInfo(name, version, source, distribution)
        try:
            self.manager.register(plugin, name=name)
        except ValueError as exc:  # pluggy: the same object under another name
            raise PluginError(f"plugin {name!r}: {exc}") from None
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin {name!r}: its hooks do not match zoo's hookspecs: {exc}") from None
        try:
            staged = _collect(self.manager, plugin, name)
            self.plugins[name] = info  # first, so clash messages can describe it
            self._apply(staged)
        except BaseException:
            self.plugins.pop(name, None)
            self.manager.unregister(plugin)
            raise
        components = tuple((c.slot, c.kind) for c in staged.components)
        architectures = tuple(a.name for a in staged.architectures)
        formats = tuple(f.model_type for f in staged.formats)
        readers = tuple(r.fmt for r in staged.readers)
        self.plugins[name] = PluginInfo(
            name, version, source, distribution, components, architectures, formats, readers
        )
        return name


def _new_manager() -> pluggy.PluginManager:
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    return manager


def _replacing(entry: Any, replaced_plugin: str) -> Any:
    return type(entry)(**{**entry.__dict__, "replaces": replaced_plugin})


def _collect(manager: pluggy.PluginManager, plugin: object, name: str) -> Staged:
    """Run one plugin's hooks with `register` callbacks that stage what it registers."""
    staged = Staged()

    def register_component(
        slot: str,
        kind: str,
        factory: Callable[..., Any],
        options: type[BaseModel] | None = None,
        *,
        override: bool = False,
        module: type | None = None,
    ) -> None:
        staged.components.append(component_entry(slot, kind, factory, options, override, name, module))

    def register_architecture(arch_name: str, source: Any, *, override: bool = False) -> None:
        staged.architectures.append(architecture_entry(arch_name, source, override, name))

    def register_format(family: Any, *, override: bool = False) -> None:
        staged.formats.append(checkpoint_format_entry(family, override, name))

    def register_reader(fmt: str, reader: Callable[..., Any], *, override: bool = False) -> None:
        staged.readers.append(spec_reader_entry(fmt, reader, override, name))

    callbacks = {
        "zoo_register_components": register_component,
        "zoo_register_architectures": register_architecture,
        "zoo_register_checkpoint_formats": register_format,
        "zoo_register_spec_readers": register_reader,
    }
    implemented = False
    for caller in manager.get_hookcallers(plugin) or []:
        for impl in caller.get_hookimpls():
            if impl.plugin is plugin:
                implemented = True
                try:
                    impl.function(register=callbacks[caller.name])
                except (PluginError, KeyboardInterrupt):
                    raise
                except BaseException as exc:  # SystemExit too: plugin code never ends the command
                    raise PluginError(f"plugin {name!r}: {caller.name} raised {type(exc).__name__}: {exc}") from exc
    if not implemented:
        raise PluginError(f"plugin {name!r} implements no zoo hook; mark {' or '.join(HOOK_NAMES)} with @zoo.hookimpl")
    refuse_twice(staged, name)
    return staged


# ---- the process-wide registry ----------------------------------------------------------
_lock = threading.RLock()
_registry: Registry | None = None
_building: Registry | None = None  # returned to plugins that use zoo while being loaded
_runtime_plugins: dict[str, object] = {}  # name -> plugin, re-applied when the registry rebuilds


def get_registry() -> Registry:
    """The process-wide registry, built on first call: built-ins, entry points, run-time plugins.

    A clash between plugins raises PluginError here (and again on the next call); a plugin
    that fails to import is recorded in ``failures``, reported once, and skipped.
    """
    global _registry, _building
    with _lock:
        if _registry is not None:
            return _registry
        if _building is not None:
            return _building
        registry = Registry()
        _building = registry
        try:
            for module_name in BUILTIN_PLUGINS:
                module = importlib.import_module(module_name)
                registry.add_plugin(module, name=module_name, version=zoo_version, source="builtin")
            load_entry_points(registry)
            for name, plugin in _runtime_plugins.items():
                registry.add_plugin(plugin, name=name)
        finally:
            _building = None
        _registry = registry
        return registry


def register_plugin(plugin: ModuleType | object | str, name: str | None = None) -> str:
    """Register a plugin at run time: a module, a module's name, or an object with hookimpls.

    Meant for notebooks: registering again under the same name replaces the earlier one
    (edit the cell, run it again). Clashes with other plugins raise PluginError and change
    nothing. Returns the plugin's name.
    """
    if isinstance(plugin, str):
        try:
            plugin = importlib.import_module(plugin)
        except ImportError as exc:
            raise PluginError(f"plugin module {plugin!r} cannot be imported: {exc}") from None
    name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
    with _lock:
        registry = get_registry()
        previous = _runtime_plugins.get(name)
        if previous is plugin:
            return name
        if previous is None:
            registry.add_plugin(plugin, name=name)
            _runtime_plugins[name] = plugin
        else:  # replace: rebuild without the old one, restoring it if the new one fails
            _runtime_plugins[name] = plugin
            try:
                _rebuild()
            except BaseException:
                _runtime_plugins[name] = previous
                _rebuild()
                raise
        return name


def reset_registry() -> None:
    """Forget the registry and run-time plugins; the next use rebuilds it.

    Call after installing a plugin distribution in a running process (and in tests).
    Specs keep what they resolved when they were made (a spec is resolved once): make
    them again to see a replaced kind.
    """
    global _registry
    with _lock:
        _registry = None
        _runtime_plugins.clear()


def _rebuild() -> None:
    global _registry
    _registry = None
    get_registry()

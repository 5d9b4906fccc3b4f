"""The registry: component kinds and named architectures, filled by pluggy plugins.

Built-in components (``zoo.components.*``) and presets (``zoo.archs.*``) are plugins like any
other; third-party ones arrive through the ``zoo`` entry-point group. The registry is built
once, lazily, on first use, so ``import zoo`` and ``zoo --help`` stay cheap.
"""

from __future__ import annotations

import importlib
import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any

import pluggy
from pydantic import BaseModel

from zoo import hookspecs
from zoo.errors import PluginError, SpecError, allowed, did_you_mean

FAMILIES: tuple[str, ...] = ("norm", "positional", "attention", "ffn", "block")
ENTRY_POINT_GROUP = "zoo"
BUILTIN_PLUGINS: tuple[str, ...] = (
    "zoo.components.norms",
    "zoo.components.positional",
    "zoo.components.attention",
    "zoo.components.ffn",
    "zoo.components.moe",
    "zoo.components.blocks",
    "zoo.archs",
)


@dataclass(frozen=True)
class ComponentEntry:
    """One registered kind: how to validate its options and how to build it."""

    family: str
    kind: str
    factory: Callable[..., Any]
    options: type[BaseModel]
    plugin: str
    doc: str = ""


@dataclass(frozen=True)
class ArchitectureEntry:
    name: str
    source: Any  # ModelSpec, dict, or zero-argument callable returning either
    plugin: str


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that raised while loading: reported once, then skipped."""

    name: str
    error: str


@dataclass
class Registry:
    components: dict[tuple[str, str], ComponentEntry] = field(default_factory=dict)
    architectures: dict[str, ArchitectureEntry] = field(default_factory=dict)
    failures: list[PluginFailure] = field(default_factory=list)
    plugins: dict[str, str] = field(default_factory=dict)  # plugin name -> version
    manager: pluggy.PluginManager | None = None

    # ---- registration -------------------------------------------------------------------
    def register_component(
        self,
        family: str,
        kind: str,
        factory: Callable[..., Any],
        options: type[BaseModel] | None = None,
        *,
        override: bool = False,
        plugin: str = "<direct>",
    ) -> None:
        if family not in FAMILIES:
            raise PluginError(
                f"plugin {plugin!r} registers unknown family {family!r}{did_you_mean(family, FAMILIES)}; "
                f"allowed: {allowed(FAMILIES)}"
            )
        if options is None:
            from zoo.interfaces import Options

            options = Options
        key = (family, kind)
        existing = self.components.get(key)
        if existing is not None and not override and existing.plugin != plugin:
            raise PluginError(
                f"{family} kind {kind!r} is registered by both {existing.plugin!r} and {plugin!r}; "
                "pass override=True in one of them to replace the other on purpose"
            )
        doc = (factory.__doc__ or "").strip().splitlines()[0] if factory.__doc__ else ""
        self.components[key] = ComponentEntry(family, kind, factory, options, plugin, doc)

    def register_architecture(
        self, name: str, source: Any, *, override: bool = False, plugin: str = "<direct>"
    ) -> None:
        existing = self.architectures.get(name)
        if existing is not None and not override and existing.plugin != plugin:
            raise PluginError(
                f"architecture {name!r} is registered by both {existing.plugin!r} and {plugin!r}; "
                "pass override=True in one of them to replace the other on purpose"
            )
        self.architectures[name] = ArchitectureEntry(name, source, plugin)

    # ---- lookup ---------------------------------------------------------------------------
    def kinds(self, family: str) -> list[str]:
        return sorted(kind for fam, kind in self.components if fam == family)

    def component(self, family: str, kind: str, *, path: str | None = None) -> ComponentEntry:
        entry = self.components.get((family, kind))
        if entry is None:
            where = path or f"{family}.kind"
            kinds = self.kinds(family)
            raise SpecError(
                f"{where}: unknown {family} kind {kind!r}{did_you_mean(str(kind), kinds)}; "
                f"allowed: {allowed(kinds)}"
            )
        return entry

    def architecture(self, name: str) -> ArchitectureEntry:
        entry = self.architectures.get(name)
        if entry is None:
            names = sorted(self.architectures)
            raise SpecError(
                f"unknown architecture {name!r}{did_you_mean(name, names)}; allowed: {allowed(names)}"
            )
        return entry

    # ---- plugins --------------------------------------------------------------------------
    def add_plugin(self, plugin: object, name: str | None = None, version: str = "") -> str:
        """Register a plugin module or object and run its hooks into this registry."""
        assert self.manager is not None
        name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        if self.manager.is_registered(plugin) or name in self.plugins:
            return name
        self.manager.register(plugin, name=name)
        self.plugins[name] = version
        _run_hooks(self, plugin, name)
        return name


def _run_hooks(registry: Registry, plugin: object, name: str) -> None:
    """Call the hooks of one plugin, with `register` callbacks that record the plugin name."""

    def register_component(family, kind, factory, options=None, *, override=False):  # type: ignore[no-untyped-def]
        registry.register_component(family, kind, factory, options, override=override, plugin=name)

    def register_architecture(arch_name, source, *, override=False):  # type: ignore[no-untyped-def]
        registry.register_architecture(arch_name, source, override=override, plugin=name)

    for hook_name, callback in (
        ("zoo_register_components", register_component),
        ("zoo_register_architectures", register_architecture),
    ):
        impl = getattr(plugin, hook_name, None)
        if impl is not None:
            impl(register=callback)


def _selected_entry_points() -> list[metadata.EntryPoint]:
    eps = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    chosen = os.environ.get("ZOO_PLUGINS")
    if chosen is None:
        return eps
    wanted = {n.strip() for n in chosen.split(",") if n.strip()}
    return [ep for ep in eps if ep.name in wanted]


def _load_entry_points(registry: Registry) -> None:
    seen: set[str] = set()
    for ep in _selected_entry_points():
        if ep.name in seen:
            continue
        seen.add(ep.name)
        version = ep.dist.version if ep.dist is not None else ""
        try:
            plugin = ep.load()
            registry.add_plugin(plugin, name=ep.name, version=version)
        except PluginError:
            raise
        except Exception as exc:  # a broken plugin is reported and skipped, never fatal
            failure = PluginFailure(ep.name, f"{type(exc).__name__}: {exc}")
            registry.failures.append(failure)
            if registry.manager is not None and registry.manager.has_plugin(ep.name):
                registry.manager.unregister(name=ep.name)
            warnings.warn(
                f"zoo plugin {ep.name!r} failed to load and was skipped: {failure.error}",
                stacklevel=2,
            )


_lock = threading.RLock()
_registry: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry, built on first call (built-ins, then entry points)."""
    global _registry
    with _lock:
        if _registry is None:
            registry = Registry(manager=pluggy.PluginManager(hookspecs.PROJECT))
            registry.manager.add_hookspecs(hookspecs)
            for module_name in BUILTIN_PLUGINS:
                registry.add_plugin(importlib.import_module(module_name), name=module_name, version="builtin")
            _registry = registry
            _load_entry_points(registry)
        return _registry


def register_plugin(plugin: ModuleType | object, name: str | None = None) -> str:
    """Register a plugin at run time (a notebook's module or object with hookimpls)."""
    return get_registry().add_plugin(plugin, name=name)


def reset_registry() -> None:
    """Forget the registry so the next use rebuilds it (tests, and after installing plugins)."""
    global _registry
    with _lock:
        _registry = None

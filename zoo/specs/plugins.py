"""Third-party plugins from the ``zoo`` entry-point group, chosen by ``ZOO_PLUGINS``.

A distribution declares ``[project.entry-points.zoo] name = "module"``; the module (or the
object the entry point names) implements ``zoo_register_components`` and/or
``zoo_register_architectures``. Loading is safe: a plugin that raises while importing, or
whose hooks raise, is recorded in ``registry.failures``, reported once per process (a
``PluginWarning``; the CLI prints it as one line) and skipped, so every other plugin and
command keeps working. A clash between two plugins is not skipped: it is a ``PluginError``
naming both, because silently picking one would change what a spec builds.

The registry imports this module (never the reverse): it hands itself to
``load_entry_points``, which needs only its ``failures`` list and ``add_plugin``
(``PluginSink``).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from importlib import metadata
from typing import Protocol

from zoo.errors import PluginConflictError, PluginError, PluginWarning

ENTRY_POINT_GROUP = "zoo"
PLUGINS_ENV = "ZOO_PLUGINS"


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded: reported once, then skipped."""

    name: str
    error: str
    distribution: str = ""


_reported: set[tuple[str, str]] = set()  # failures already reported in this process


def chosen_plugin_names() -> set[str] | None:
    """Names listed in ZOO_PLUGINS (empty: none), or None when it is unset (all)."""
    chosen = os.environ.get(PLUGINS_ENV)
    if chosen is None:
        return None
    return {name.strip() for name in chosen.split(",") if name.strip()}


def installed_entry_points() -> list[metadata.EntryPoint]:
    """Every entry point of group ``zoo`` (the same distribution twice on sys.path: once)."""
    unique: dict[tuple[str, str], metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        unique.setdefault((ep.name, ep.value), ep)
    return sorted(unique.values(), key=lambda ep: ep.name)


class PluginSink(Protocol):
    """What loading entry points needs of the registry: where failures go, and how a plugin
    is added (``zoo.specs.registry.Registry`` is one)."""

    failures: list[PluginFailure]

    def add_plugin(
        self,
        plugin: object,
        name: str | None = None,
        version: str = "",
        *,
        source: str = "runtime",
        distribution: str = "",
    ) -> str: ...


def one_line(text: str) -> str:
    """A message on one line: pluggy's validation errors span three."""
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip()) or type(text).__name__


def _distribution(ep: metadata.EntryPoint) -> tuple[str, str]:
    dist = ep.dist
    if dist is None:
        return "", ""
    return str(dist.metadata["Name"] or dist.name), str(dist.version)


def load_entry_points(registry: PluginSink) -> None:
    """Load the chosen entry points into ``registry``; record and report the broken ones."""
    eps = installed_entry_points()
    chosen = chosen_plugin_names()
    by_name: dict[str, metadata.EntryPoint] = {}
    for ep in eps:
        if chosen is not None and ep.name not in chosen:
            continue
        if ep.name in by_name:
            first = _distribution(by_name[ep.name])[0]
            _fail(
                registry,
                ep.name,
                f"the name is declared by both {first!r} and {_distribution(ep)[0]!r}; loaded the one from {first!r}",
                _distribution(ep)[0],
            )
            continue
        by_name[ep.name] = ep
    for missing in sorted((chosen or set()) - {ep.name for ep in eps}):
        names = ", ".join(sorted({ep.name for ep in eps})) or "none"
        _fail(registry, missing, f"{PLUGINS_ENV} names it but no such plugin is installed; installed: {names}")
    for name, ep in by_name.items():
        distribution, version = _distribution(ep)
        try:
            plugin = ep.load()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit too: a broken plugin is reported and skipped, never fatal
            _fail(registry, name, f"import failed: {type(exc).__name__}: {exc}", distribution)
            continue
        try:
            registry.add_plugin(plugin, name=name, version=version, source="entry point", distribution=distribution)
        except PluginConflictError:
            raise  # a clash: the user must choose (override=True or ZOO_PLUGINS)
        except PluginError as exc:
            _fail(registry, name, str(exc).removeprefix(f"plugin {name!r}: "), distribution)


def _fail(registry: PluginSink, name: str, error: str, distribution: str = "") -> None:
    error = one_line(error)
    failure = PluginFailure(name, error, distribution)
    registry.failures.append(failure)
    key = (name, error)
    if key in _reported:
        return
    _reported.add(key)
    where = f" ({distribution})" if distribution else ""
    warnings.warn(f"plugin {name!r}{where} skipped: {error}", PluginWarning, stacklevel=2)

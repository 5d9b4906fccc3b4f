"""`zoo plugins`: every plugin with its version and the components and architectures it adds."""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zoo.registry import PluginInfo, Registry


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plugins",
        help="plugins (built in and installed) with versions and what each registers",
        description="List every plugin: built-in ones, installed distributions with a `zoo` entry point "
        "(ZOO_PLUGINS=a,b loads only those; empty loads none) and plugins that failed to load.",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=run_plugins)


def plugin_rows(registry: Registry) -> list[dict[str, Any]]:
    """One JSON-ready row per loaded plugin, in load order (built-ins first)."""
    return [_row(registry, info) for info in registry.plugins.values()]


def _row(registry: Registry, info: PluginInfo) -> dict[str, Any]:
    components: dict[str, list[str]] = {}
    overridden = []
    for family, kind in info.components:
        components.setdefault(family, []).append(kind)
        owner = registry.components[(family, kind)].plugin
        if owner != info.name:
            overridden.append({"family": family, "kind": kind, "by": owner})
    overridden_archs = [
        {"architecture": name, "by": registry.architectures[name].plugin}
        for name in info.architectures
        if registry.architectures[name].plugin != info.name
    ]
    return {
        "name": info.name,
        "version": info.version,
        "source": info.source,
        "distribution": info.distribution or None,
        "components": {family: sorted(kinds) for family, kinds in components.items()},
        "architectures": sorted(info.architectures),
        "overridden": overridden + overridden_archs,
    }


def run_plugins(args: argparse.Namespace) -> int:
    from zoo.registry import get_registry

    registry = get_registry()
    rows = plugin_rows(registry)
    failures = [{"name": f.name, "distribution": f.distribution or None, "error": f.error} for f in registry.failures]
    if args.json:
        print(json.dumps({"plugins": rows, "failures": failures, "ZOO_PLUGINS": os.environ.get("ZOO_PLUGINS")}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="plugins")
    for column in ("plugin", "version", "from", "components", "architectures"):
        table.add_column(column, overflow="fold")
    for row in rows:
        source = row["distribution"] or row["source"]
        shadowed = {(o.get("family"), o.get("kind")): o["by"] for o in row["overridden"] if "kind" in o}
        components = "\n".join(
            f"{family}: " + ", ".join(
                kind + (f" (overridden by {shadowed[(family, kind)]})" if (family, kind) in shadowed else "")
                for kind in kinds
            )
            for family, kinds in row["components"].items()
        )
        table.add_row(row["name"], row["version"], source, components, ", ".join(row["architectures"]))
    console.print(table)
    if failures:
        failed = Table(title="skipped plugins", title_style="bold red")
        for column in ("plugin", "distribution", "error"):
            failed.add_column(column, overflow="fold")
        for failure in failures:
            failed.add_row(failure["name"], failure["distribution"] or "", failure["error"])
        console.print(failed)
    chosen = os.environ.get("ZOO_PLUGINS")
    if chosen is not None:
        console.print(f"ZOO_PLUGINS={chosen!r}: only these installed plugins were loaded")
    return 0

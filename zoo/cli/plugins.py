"""`zoo plugins`: every plugin with its version and the components, architectures (and, in
JSON, Hugging Face checkpoint formats) it adds."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from zoo.cli.output import TableData, add_format_arguments, print_json, print_table

if TYPE_CHECKING:
    from zoo.specs.registry import PluginInfo, Registry


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plugins",
        help="plugins (built in and installed) with versions and what each registers",
        description="List every plugin: built-in ones, installed distributions with a `zoo` entry point "
        "(ZOO_PLUGINS=a,b loads only those; empty loads none) and plugins that failed to load. A skipped "
        "plugin is reported once: in the 'skipped plugins' table (or the JSON's failures), or with "
        "--format csv, which prints the plugins only, as a warning line on stderr.",
    )
    p.add_argument(
        "--check",
        nargs="?",
        const="",
        default=None,
        metavar="NAME",
        help="run zoo's part contract on every kind plugin NAME registers (default: every installed plugin): "
        "builds, parameter counts, declared state bytes, cached decode, causality, save/load; "
        "one line per failure, exit 2 if any",
    )
    add_format_arguments(p)
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
        "checkpoint_formats": sorted(info.checkpoint_formats),
        "overridden": overridden + overridden_archs,
    }


def run_plugins(args: argparse.Namespace) -> int:
    import warnings

    from zoo.errors import PluginWarning
    from zoo.specs.registry import get_registry

    with warnings.catch_warnings():
        if args.format != "csv":  # the failures are part of this command's output: not a warning too
            warnings.simplefilter("ignore", PluginWarning)
        registry = get_registry()
    if args.check is not None:
        return run_check(registry, args.check)
    rows = plugin_rows(registry)
    failures = [{"name": f.name, "distribution": f.distribution or None, "error": f.error} for f in registry.failures]
    chosen = os.environ.get("ZOO_PLUGINS")
    if args.format == "json":
        print_json({"plugins": rows, "failures": failures, "ZOO_PLUGINS": chosen})
        return 0
    print_table(
        TableData(
            "plugins", ["plugin", "version", "from", "components", "architectures"], [_table_row(row) for row in rows]
        ),
        args.format,
    )
    if failures and args.format != "csv":
        print()
        print_table(
            TableData(
                "skipped plugins",
                ["skipped plugin", "distribution", "error"],
                [[f["name"], f["distribution"] or "", f["error"]] for f in failures],
            ),
            args.format,
        )
    if chosen is not None:
        sys.stderr.write(f"zoo: ZOO_PLUGINS={chosen!r}: only these installed plugins were loaded\n")
    return 0


def _table_row(row: dict[str, Any]) -> list[str]:
    source = row["distribution"] or row["source"]
    shadowed = {(o.get("family"), o.get("kind")): o["by"] for o in row["overridden"] if "kind" in o}
    components = "\n".join(
        f"{family}: "
        + ", ".join(
            kind + (f" (overridden by {shadowed[(family, kind)]})" if (family, kind) in shadowed else "")
            for kind in kinds
        )
        for family, kinds in row["components"].items()
    )
    return [row["name"], row["version"], source, components, ", ".join(row["architectures"])]


def run_check(registry: Registry, name: str) -> int:
    """``--check``: the contract on one plugin, or on every one not built in."""
    from zoo.errors import SpecError
    from zoo.harness.contract_check import check_plugin

    if name and name not in registry.plugins:
        raise SpecError(f"plugins --check: no plugin {name!r}; loaded: {', '.join(registry.plugins)}")
    names = [name] if name else [n for n, info in registry.plugins.items() if info.source != "builtin"]
    failures = [line for plugin in names for line in check_plugin(plugin)]
    for line in failures:
        print(line)
    if not failures:
        print(f"contract check passed: {', '.join(names) or 'no plugins installed'}")
    return 2 if failures else 0

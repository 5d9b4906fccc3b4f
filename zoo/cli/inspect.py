"""`zoo list`, `zoo show` and `zoo schema`: what exists and what a spec costs."""

from __future__ import annotations

import argparse
import json
import sys

from zoo.cli.common import add_spec_arguments, load_spec


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("list", help="architectures, and component kinds by family")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=run_list)

    p = subparsers.add_parser("show", help="a spec as YAML or JSON, with parameters and KV bytes")
    add_spec_arguments(p, positional_arch=True)
    p.add_argument("--format", choices=("yaml", "json"), default="yaml")
    p.set_defaults(func=run_show)

    p = subparsers.add_parser("schema", help="JSON Schema of ModelSpec (for editors)")
    p.set_defaults(func=run_schema)


def _fmt(n: int) -> str:
    return f"{n:,}"


def run_list(args: argparse.Namespace) -> int:
    import zoo
    from zoo.registry import FAMILIES, get_registry

    from zoo.errors import PluginError

    registry = get_registry()
    rows = []
    for name in sorted(registry.architectures):
        try:
            spec = zoo.spec(name)
        except PluginError as exc:  # a plugin's broken preset: reported, the others still listed
            sys.stderr.write(f"zoo: warning: skipped {exc}\n")
            continue
        count = zoo.count_params(spec)
        rows.append({
            "name": name,
            "params": count.total,
            "active": count.active,
            "kv_bytes_per_token_bf16": zoo.kv_bytes_per_token(spec),
            "plugin": registry.architectures[name].plugin,
        })
    components = {family: registry.kinds(family) for family in FAMILIES}
    if args.format == "json":
        print(json.dumps({"architectures": rows, "components": components}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="architectures")
    for column in ("name", "params", "active", "KV bytes/token (bf16)", "from"):
        table.add_column(column, justify="right" if column not in ("name", "from") else "left", no_wrap=True)
    for row in rows:
        table.add_row(row["name"], _fmt(row["params"]), _fmt(row["active"]), _fmt(row["kv_bytes_per_token_bf16"]), row["plugin"])
    console.print(table)
    kinds = Table(title="components")
    kinds.add_column("family")
    kinds.add_column("kinds")
    for family, names in components.items():
        kinds.add_row(family, ", ".join(names))
    console.print(kinds)
    return 0


def run_show(args: argparse.Namespace) -> int:
    import zoo

    spec = load_spec(args)
    count = zoo.count_params(spec)
    summary = {
        "params": {
            "total": count.total,
            "active": count.active,
            "embedding": count.embedding,
            "unembedding": count.unembedding,
            "by_component": count.by_component,
        },
        "kv_bytes_per_token": {"bfloat16": zoo.kv_bytes_per_token(spec, "bfloat16"), "float32": zoo.kv_bytes_per_token(spec, "float32")},
        "kv_cache_bytes_at_max_seq_len_bf16": zoo.kv_cache_bytes(spec, 1, spec.max_seq_len, "bfloat16"),
    }
    if args.format == "json":
        print(json.dumps({"spec": spec.to_dict(), "analysis": summary}, indent=2))
        return 0
    import yaml

    print(spec.to_yaml().rstrip())
    print("# --- analysis ---")
    print(yaml.safe_dump(summary, sort_keys=False).rstrip())
    return 0


def run_schema(args: argparse.Namespace) -> int:
    from zoo.spec_schema import spec_json_schema

    print(json.dumps(spec_json_schema(), indent=2))
    return 0

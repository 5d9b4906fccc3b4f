"""`zoo list`, `zoo show` and `zoo schema`: what exists and what a spec costs."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

from zoo.cli.common import add_spec_arguments, load_spec
from zoo.cli.output import TableData, add_format_arguments, print_json, print_table


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "list",
        help="architectures, and component kinds by family",
        description="Architectures with parameters and KV bytes per token, and the component kinds of each "
        "family. The figures are cached (see ZOO_CACHE_DIR) until zoo or a plugin changes, so a "
        "repeated `zoo list` does not import torch. --format csv prints the architectures only.",
    )
    add_format_arguments(p)
    p.add_argument("--no-cache", action="store_true", help="recompute everything, ignoring and not writing the cache")
    p.set_defaults(func=run_list)

    p = subparsers.add_parser(
        "show",
        help="a spec as YAML or JSON, with parameters and KV bytes",
        description="A spec with its analysis. In YAML the analysis is a block of comments, so the output "
        'loads back with `zoo show --spec FILE`; in JSON it is {"spec": ..., "analysis": ...}, which '
        "--spec also reads (the analysis is ignored).",
    )
    add_spec_arguments(p, positional_arch=True)
    p.add_argument(
        "--weights",
        metavar="PATH",
        help="a checkpoint: a folder with config.json, a GGUF file or a hub "
        "repo id; its spec and how its weights are stored, read from metadata (no weight is loaded)",
    )
    add_format_arguments(p, formats=("yaml", "json"), default="yaml")
    p.set_defaults(func=run_show)

    p = subparsers.add_parser(
        "schema",
        help="JSON Schema of ModelSpec (for editors)",
        description="Print the JSON Schema of ModelSpec on stdout: point an editor's YAML/JSON language server at "
        "it for completion and checking of spec files (`zoo schema > zoo-spec.schema.json`).",
    )
    p.set_defaults(func=run_schema)


def run_list(args: argparse.Namespace) -> int:
    from zoo.cli.catalog import catalog

    document = catalog(use_cache=not args.no_cache)
    if args.format == "json":
        print_json(document)
        return 0
    architectures = TableData(
        "architectures",
        ["name", "params", "active", "KV bytes/token (bf16)", "topology", "from"],
        [
            [
                r["name"],
                r["params"],
                r["active"],
                _or_none(r["kv_bytes_per_token_bf16"]),
                r.get("topology"),
                r["plugin"],
            ]
            for r in document["architectures"]
        ],
    )
    components = TableData(
        "components",
        ["family", "kinds"],
        [[family, ", ".join(kinds)] for family, kinds in document["components"].items()],
    )
    print_table(architectures, args.format)
    if args.format != "csv":
        print()
        print_table(components, args.format)
    return 0


def _or_none(value):  # type: ignore[no-untyped-def]
    return "none" if value is None else value


NO_CACHE = "none: an encoder-only model keeps no cache"
DTYPES = ("bfloat16", "float32")


def analysis_summary(spec) -> dict:  # type: ignore[no-untyped-def]
    """Parameters and cache bytes of a spec, as `zoo show` prints them, by its family: an
    encoder-only model has no cache (its KV entries are None and ``cache`` says why); an
    encoder-decoder's self K/V grow per generated token and its cross K/V per encoder token
    (the cache at max_seq_len holds both at that length)."""
    import zoo
    from zoo.analysis.counts import cache_bytes, topology
    from zoo.analysis.published import ACTIVE_CONVENTION, published_comparison
    from zoo.analysis.states import state_dtypes

    count = zoo.count_params(spec)
    kind = topology(spec)
    summary = {
        "topology": kind,
        "params": {
            "total": count.total,
            "active": count.active,
            "active_counts": ACTIVE_CONVENTION,
            "active_with_embedding": count.active_with_embedding,
            "embedding": count.embedding,
            "unembedding": count.unembedding,
            "by_component": count.by_component,
        },
    }
    published = published_comparison(spec)
    if published is not None:
        summary["params"]["published"] = published
    if kind == "encoder":
        return {
            **summary,
            "cache": NO_CACHE,
            "kv_bytes_per_token": None,
            "state_bytes_per_sequence": None,
            "kv_cache_bytes_at_max_seq_len_bf16": None,
        }
    per = {dtype: cache_bytes(spec, 1, 1, 1, dtype=dtype) for dtype in DTYPES}
    summary["kv_bytes_per_token"] = {dtype: per[dtype].token for dtype in DTYPES}
    if kind == "encoder-decoder":
        summary["cross_kv_bytes_per_encoder_token"] = {dtype: per[dtype].memory for dtype in DTYPES}
    summary["state_bytes_per_sequence"] = {dtype: per[dtype].sequence for dtype in DTYPES}
    summary["state_dtypes"] = {dtype: state_dtypes(spec, dtype) for dtype in DTYPES}  # by the model's dtype
    memory = spec.max_seq_len if kind == "encoder-decoder" else 0
    summary["kv_cache_bytes_at_max_seq_len_bf16"] = cache_bytes(spec, 1, spec.max_seq_len, memory, "bfloat16").total
    if kind == "encoder-decoder":  # the figure above is not max_seq_len x the per-token bytes: say what it holds
        summary["kv_cache_at_max_seq_len_holds"] = (
            f"self K/V of {spec.max_seq_len} decoder tokens + cross K/V of {spec.max_seq_len} encoder tokens"
        )
    return summary


def checkpoint_summary(path: Path) -> dict[str, Any]:
    """How a checkpoint stores its weights: the file's format, bytes and tensor types, and the
    layout each type loads into (a GGUF's linear layers: int4 / int8 packed, else float)."""
    if path.suffix == ".gguf":
        from zoo.hub.gguf.quantized import layout
        from zoo.hub.gguf.reader import GGUFCheckpoint

        g = GGUFCheckpoint(path)
        types = Counter(g.type_name(name) for name in g.tensors)
        return {
            "file": str(path),
            "format": "gguf",
            "bytes": path.stat().st_size,
            "tensor_types": dict(types.most_common()),
            "linear_layers_load_as": {t: layout(t) or "float (the run's dtype)" for t in types},
        }
    files = sorted(path.glob("*.safetensors"))
    return {
        "file": str(path),
        "format": "safetensors",
        "bytes": sum(f.stat().st_size for f in files),
        "files": [f.name for f in files],
    }


def _spec_and_checkpoint(args: argparse.Namespace) -> tuple[Any, dict[str, Any] | None]:
    from zoo.errors import SpecError
    from zoo.hub.loading import checkpoint_spec
    from zoo.hub.text import resolve

    if not args.weights:
        return load_spec(args), None
    if args.arch or args.spec_file or args.hf_config:
        raise SpecError("--weights: give it alone, not with an architecture name, --spec or --hf-config")
    spec = checkpoint_spec(args.weights)  # named as from_pretrained names it
    path = resolve(args.weights)
    return (spec.override(args.overrides) if args.overrides else spec), checkpoint_summary(path)


def run_show(args: argparse.Namespace) -> int:
    import yaml

    spec, checkpoint = _spec_and_checkpoint(args)
    summary = analysis_summary(spec)
    if checkpoint is not None:
        summary["checkpoint"] = checkpoint
    if args.format == "json":
        print_json({"spec": spec.to_dict(), "analysis": summary})
        return 0
    analysis = yaml.safe_dump(summary, sort_keys=False).rstrip()
    print(spec.to_yaml().rstrip())
    print("# --- analysis (comments: `zoo show --spec` reads this file back) ---")
    print("\n".join(f"# {line}" for line in analysis.splitlines()))
    return 0


def run_schema(args: argparse.Namespace) -> int:
    from zoo.specs.schema import spec_json_schema

    print_json(spec_json_schema())
    return 0

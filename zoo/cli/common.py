"""Options shared by commands that take a model: --arch, --spec, --hf-config, --set."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zoo.model_spec import ModelSpec


def add_spec_arguments(parser: argparse.ArgumentParser, *, positional_arch: bool = False) -> None:
    if positional_arch:
        parser.add_argument("arch", nargs="?", help="architecture name (see `zoo list`)")
    else:
        parser.add_argument("--arch", help="architecture name (see `zoo list`)")
    parser.add_argument("--spec", dest="spec_file", metavar="FILE", help="a spec in YAML or JSON")
    parser.add_argument("--hf-config", metavar="FILE", help="a Hugging Face config.json")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a spec field, e.g. attention.n_kv_heads=1 (repeatable)",
    )


def load_spec(args: argparse.Namespace) -> ModelSpec:
    """The spec named by --arch / ARCH, --spec or --hf-config, with --set applied."""
    from zoo.errors import SpecError
    from zoo.model_spec import ModelSpec

    sources = [s for s in (getattr(args, "arch", None), args.spec_file, args.hf_config) if s]
    if len(sources) != 1:
        raise SpecError("give exactly one of an architecture name, --spec FILE or --hf-config FILE")
    if args.spec_file:
        spec = ModelSpec.from_file(args.spec_file)
    elif args.hf_config:
        spec = ModelSpec.from_hf_config(args.hf_config)
    else:
        import zoo

        spec = zoo.spec(args.arch)
    if args.overrides:
        spec = spec.override(args.overrides)
    return spec

"""Helpers shared by the commands: --arch, --spec, --hf-config, --set, and the progress bar."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zoo.specs.model import ModelSpec


def add_spec_arguments(parser: argparse.ArgumentParser, *, positional_arch: bool = False) -> None:
    if positional_arch:
        parser.add_argument("arch", nargs="?", help="architecture name (see `zoo list`)")
    else:
        parser.add_argument("--arch", help="architecture name (see `zoo list`)")
    parser.add_argument("--spec", dest="spec_file", metavar="FILE", help="a spec in YAML or JSON")
    parser.add_argument("--hf-config", metavar="FILE", help="a Hugging Face config.json")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec field, e.g. attention.n_kv_heads=1 (repeatable)",
    )


def load_spec(args: argparse.Namespace) -> ModelSpec:
    """The spec named by --arch / ARCH, --spec or --hf-config, with --set applied."""
    from zoo.errors import SpecError
    from zoo.specs.model import ModelSpec

    sources = [s for s in (getattr(args, "arch", None), args.spec_file, args.hf_config) if s]
    if len(sources) != 1:
        raise SpecError("give exactly one of an architecture name, --spec FILE or --hf-config FILE")
    if args.spec_file:
        spec = ModelSpec.from_file(args.spec_file)
    elif args.hf_config and str(args.hf_config).endswith(".gguf"):  # metadata, not JSON
        from zoo.hub.loading import checkpoint_spec

        spec = checkpoint_spec(args.hf_config)
    elif args.hf_config:
        spec = ModelSpec.from_hf_config(args.hf_config)
    else:
        import zoo

        spec = zoo.spec(args.arch)
    if args.overrides:
        spec = spec.override(args.overrides)
    return spec


@contextlib.contextmanager
def progress_bar(console: Any, what: str) -> Iterator[Callable[[str, int, int], None]]:
    """A transient progress bar on ``console``, yielding ``update(description, done, total)``.

    It shows the time spent and, once steps have finished, an estimate of the time left
    (descriptions may carry a better one, as `zoo bench` does per timed round). Off unless
    the console is a terminal: nothing reaches a pipe or a log, and a bar stopped on a
    captured stream would still write a newline, making an error raised mid-run two lines.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task(what, total=None)

        def update(description: str, done: int, total: int) -> None:
            bar.update(task, description=f"{what}: {description}", completed=done, total=total)

        yield update

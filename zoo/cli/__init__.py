"""The `zoo` command: thin parsing and rendering over the library.

Each subcommand lives in its own module with ``add_parser(subparsers)``; the modules load
only what they need when run, so ``zoo --help`` imports no torch-heavy code. Any
``ZooError`` becomes one line on stderr and exit status 2 (``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

COMMAND_MODULES: tuple[str, ...] = (
    "zoo.cli.inspect",
    "zoo.cli.plugins",
    "zoo.cli.generate",
    "zoo.cli.bench",
    "zoo.cli.compare",
    "zoo.cli.train",
    "zoo.cli.probe",
    "zoo.cli.quantize",
    "zoo.cli.hardware",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports bad usage in one line and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)


def _version() -> str:
    """The installed distribution's version (pyproject.toml's, through the package metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zoo")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="zoo", description="Assemble transformer LMs from parts and measure them.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"zoo {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from zoo.errors import ZooError

    try:
        with _plugin_warnings_as_lines():
            return int(args.func(args) or 0)
    except ZooError as exc:
        if args.debug:
            traceback.print_exc()
        message = str(exc).replace("\n", " ")
        sys.stderr.write(f"zoo: error: {message}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("zoo: interrupted\n")
        return 130
    except BrokenPipeError:
        return _reader_went_away()


def _reader_went_away() -> int:
    """The reader of stdout closed the pipe (``zoo schema | head -1``): end quietly.

    stdout is pointed at /dev/null so the interpreter's final flush cannot fail again, and
    the status is the one a process killed by SIGPIPE has in a shell (128 + 13).
    """
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 141


@contextmanager
def _plugin_warnings_as_lines() -> Iterator[None]:
    """Print a skipped plugin as one 'zoo: warning: ...' line, not a Python warning."""
    from zoo.errors import PluginWarning

    default_show = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        if issubclass(category, PluginWarning):
            sys.stderr.write(f"zoo: warning: {message}\n")
        else:
            default_show(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = default_show

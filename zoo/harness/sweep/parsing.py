"""The command line's grid syntax: ``--vary KEY=V1,V2`` axes, ``--set``/``--baseline``
assignments, values read as YAML scalars and split on commas outside brackets."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zoo.errors import BenchError
from zoo.files.safe_io import parse_scalar as parse


def split_values(text: str) -> list[str]:
    """Split on commas outside brackets and braces: 'a,{kind: moe, top_k: 2}' -> two items."""
    items, depth, current = [], 0, ""
    for char in text:
        if char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    return [item.strip() for item in items]


def parse_scalar(raw: str) -> Any:
    """A value as --set reads it: YAML (numbers, null, true, {flow: mappings}), else the text."""

    return parse(raw, BenchError, repr(raw[:40]))


def parse_vary(items: Iterable[str]) -> dict[str, list[Any]]:
    """``["attention.kind=mha,gqa", "batch_size=1,4"]`` -> ordered axes."""
    axes: dict[str, list[Any]] = {}
    for item in items:
        if "=" not in item:
            raise BenchError(f"--vary {item!r}: expected KEY=V1,V2,..., e.g. attention.kind=mha,gqa,mqa")
        key, raw = (part.strip() for part in item.split("=", 1))
        values = [parse_scalar(v) for v in split_values(raw) if v != ""]
        if not key or not values:
            raise BenchError(
                f"--vary {item!r}: the grid is empty; give at least one value, e.g. {key or 'attention.kind'}=mha,gqa"
            )
        if key in axes:
            raise BenchError(f"--vary {key}: given twice; give every value in one --vary")
        axes[key] = values
    return axes


def parse_assignments(items: Iterable[str], what: str) -> dict[str, Any]:
    """``["n_layers=2"]`` -> {"n_layers": 2} (for --set and --baseline)."""
    out: dict[str, Any] = {}
    for item in items:
        for part in split_values(item) if what == "--baseline" else [item]:
            if "=" not in part:
                raise BenchError(f"{what} {part!r}: expected KEY=VALUE")
            key, raw = part.split("=", 1)
            out[key.strip()] = parse_scalar(raw.strip())
    return out

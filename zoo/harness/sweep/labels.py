"""How a sweep point is named in tables and legends: its axis values, a mapping by its kinds
and options, a per-layer override by what it puts on which share of the layers
('mamba ×3/4'), never the raw dict."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def label_of(values: Mapping[str, Any]) -> str:
    """'attention.kind=mqa batch_size=4'; a mapping by its kinds and options, a per-layer
    override by what it puts on which share of the layers ('mamba ×3/4'), not the raw dict."""
    return " ".join(short_value(k, v) for k, v in values.items()) or "(base)"


def short_value(key: str, value: Any) -> str:
    """One axis value as a legend or table reads it (``label_of``)."""
    if not isinstance(value, Mapping):
        return f"{key}={format_value(value)}"
    if key == "layers":
        return (
            ", ".join(f"{_leaves(override)} {_share(str(where))}" for where, override in value.items()) or "layers=none"
        )
    return f"{key}={_leaves(value)}"


def _leaves(value: Any) -> str:
    """{attention: {kind: mamba}} -> 'mamba'; {kind: moe, top_k: 2} -> 'moe(top_k=2)'."""
    if not isinstance(value, Mapping):
        return format_value(value)
    if len(value) == 1 and isinstance(next(iter(value.values())), Mapping):
        return _leaves(next(iter(value.values())))
    options = ",".join(f"{k}={_leaves(v)}" for k, v in value.items() if k != "kind")
    kind = format_value(value["kind"]) if "kind" in value else ""
    return f"{kind}({options})" if kind and options else kind or options


def _share(selectors: str) -> str:
    """'0::4,1::4,2::4' -> '×3/4' (those layers of every 4); other selectors as given ('@0,5')."""
    parts = [part.strip().split("::") for part in selectors.split(",")]
    steps = {p[1] for p in parts if len(p) == 2 and p[0].isdigit() and p[1].isdigit()}
    if len(steps) == 1 and all(len(p) == 2 for p in parts):
        return f"×{len(parts)}/{steps.pop()}"
    return f"@{selectors}"


def format_value(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}={format_value(v)}" for k, v in value.items()) + "}"
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)

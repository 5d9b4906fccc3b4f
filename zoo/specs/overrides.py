"""Dotted-key updates of a spec (``ModelSpec.override``): parsing ``a.b=c`` strings, setting
nested keys, and pruning per-layer overrides when a component's kind is swapped."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from zoo.errors import SpecError
from zoo.files.safe_io import parse_scalar
from zoo.specs.registry import get_registry


def prune_layer_overrides(
    layers: Mapping[str, Mapping[str, Any]], slot: str, new_kind: str
) -> dict[str, dict[str, Any]]:
    """Per-layer overrides of a family whose kind was swapped keep only what the new kind has.

    ``positional.kind=alibi`` on Gemma 3 drops the per-layer RoPE ``theta`` rather than
    failing: the same rule as for the base component.
    """
    fields = set(get_registry().component(slot, new_kind).options.model_fields)
    pruned: dict[str, dict[str, Any]] = {}
    for key, override in layers.items():
        override = dict(override)
        part = override.get(slot)
        if isinstance(part, Mapping) and "kind" not in part:
            kept = {k: v for k, v in part.items() if k in fields}
            if kept:
                override[slot] = kept
            else:
                del override[slot]
        if override:
            pruned[key] = override
    return pruned


def parse_updates(updates: Mapping[str, Any] | Iterable[str] | str) -> list[tuple[str, Any]]:
    if isinstance(updates, Mapping):
        return [(str(k), v) for k, v in updates.items()]
    if isinstance(updates, str):
        updates = [updates]
    pairs = []
    for item in updates:
        if "=" not in item:
            raise SpecError(f"{item!r}: expected key=value, e.g. attention.n_kv_heads=1")
        key, raw = item.split("=", 1)
        pairs.append((key.strip(), parse_scalar(raw, SpecError, f"--set {key.strip()}")))
    return pairs


def set_nested(target: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        nxt = target.get(key)
        if not isinstance(nxt, dict):
            nxt = {}
            target[key] = nxt
        target = nxt
    target[keys[-1]] = value

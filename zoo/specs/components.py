"""Components as a spec stores them, and their resolution against the registry.

A component is ``{"kind": name, ...options}``; ``resolve_component`` validates the options
with the registered kind's ``Options`` (unknown keys are errors) and ``merge_component``
applies an update (a new kind keeps only the options it also has). ``zoo.specs.model``
builds the whole-model spec on these.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from zoo.errors import SpecError, allowed, did_you_mean
from zoo.files.safe_io import bounded_repr
from zoo.specs.interfaces import Options
from zoo.specs.registry import ComponentEntry, get_registry

COMPONENT_FIELDS: tuple[str, ...] = ("norm", "positional", "attention", "ffn", "block")  # per layer
MODEL_PARTS: tuple[str, ...] = ("embedding", "head")  # one per model
DEFAULT_KINDS: dict[str, str] = {"block": "pre_norm", "embedding": "token", "head": "causal_lm"}  # when a spec names none


def format_validation_error(
    error: ValidationError, prefix: str = "", allowed_keys: Iterable[str] | None = None
) -> str:
    """One clause per problem: 'field.path: message (got value)'."""
    lines = []
    for err in error.errors():
        loc = ".".join(str(p) for p in err["loc"] if p != "__root__")
        msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        named = re.match(r"^([A-Za-z_][\w.]*): (.*)$", msg)
        if named and not loc:  # a model validator naming its own field
            loc, msg = named.group(1), named.group(2)
        path = ".".join(p for p in (prefix, loc) if p)
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
            if allowed_keys is not None:
                keys = list(allowed_keys)
                msg += f"{did_you_mean(str(err['loc'][-1]), keys)}; allowed: {allowed(keys)}"
        elif err["type"] == "missing":
            msg = "required but missing"
        got = err.get("input")
        quiet = err["type"] in ("missing", "extra_forbidden") or isinstance(got, Mapping) or named
        lines.append(f"{path or '<spec>'}: {msg}{'' if quiet else f' (got {bounded_repr(got)})'}")
    return "; ".join(lines)


class ComponentSpec(BaseModel):
    """A component as the spec stores it: its kind plus that kind's options, flat."""

    model_config = ConfigDict(extra="allow", frozen=True)
    kind: str

    def options_dict(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


@dataclass(frozen=True)
class ResolvedComponent:
    """A component of one layer, options validated by its registered kind; its options
    are read as ``component.options.<name>``."""

    slot: str
    kind: str
    options: Options
    entry: ComponentEntry

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.options.model_dump()}


@dataclass(frozen=True)
class LayerSpec:
    index: int
    norm: ResolvedComponent
    positional: ResolvedComponent
    attention: ResolvedComponent
    ffn: ResolvedComponent
    block: ResolvedComponent


def deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def as_component_dict(raw: Any, path: str) -> dict[str, Any]:
    if isinstance(raw, ComponentSpec):
        return raw.model_dump()
    if isinstance(raw, str):
        return {"kind": raw}
    if isinstance(raw, Mapping):
        return dict(raw)
    raise SpecError(f"{path}: expected a mapping like {{kind: ..., ...}} or a kind name, got {raw!r}")


def merge_component(slot: str, base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """Apply an update to a component; a new kind keeps only the options it also has."""
    new_kind = update.get("kind")
    if new_kind is None or new_kind == base.get("kind"):
        return deep_merge(_unfollowed(slot, base, update), update)
    entry = get_registry().component(slot, str(new_kind), path=f"{slot}.kind")
    keep = set(entry.options.model_fields) - set(entry.options.reset_on_kind_change)
    carried = {k: v for k, v in base.items() if k in keep and k not in update}
    try:
        entry.options.model_validate(deep_merge(carried, {k: v for k, v in update.items() if k != "kind"}))
    except ValidationError as exc:  # a carried value the new kind cannot take is dropped too
        rejected = {str(err["loc"][0]) for err in exc.errors() if err["loc"]}
        carried = {k: v for k, v in carried.items() if k not in rejected}
    except (ValueError, TypeError):
        pass
    return deep_merge(carried, update)


def _unfollowed(slot: str, base: Mapping[str, Any], update: Mapping[str, Any]) -> Mapping[str, Any]:
    """``base`` less the options that follow one the update sets (``Options.follows``), so
    the kind's default derives them again; unless the update sets them too."""
    kind = base.get("kind")
    registry = get_registry()
    if kind is None or str(kind) not in registry.kinds(slot):
        return base
    follows = registry.component(slot, str(kind), path=f"{slot}.kind").options.follows
    dropped = {option for option, leader in follows.items() if leader in update and option not in update}
    return {k: v for k, v in base.items() if k not in dropped} if dropped else base


def resolve_component(
    slot: str, raw: Any, path: str, context: Mapping[str, Any]
) -> ResolvedComponent:
    data = as_component_dict(raw, path)
    kind = data.pop("kind", None)
    registry = get_registry()
    if kind is None:
        raise SpecError(f"{path}.kind: required but missing; allowed: {allowed(registry.kinds(slot))}")
    entry = registry.component(slot, str(kind), path=f"{path}.kind")
    try:
        options = entry.options.model_validate(data, context=dict(context))
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, prefix=path, allowed_keys=entry.options.model_fields)) from None
    except (ValueError, TypeError) as exc:
        raise SpecError(f"{path}: {exc}") from None
    return ResolvedComponent(slot, str(kind), options, entry)

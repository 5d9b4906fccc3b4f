"""Components as a spec stores them: ``{"kind": name, ...options}``, and once resolved
against the registry (``zoo.specs.resolution``), a ``ResolvedComponent`` per slot of a
``LayerSpec``. These are plain records: part interfaces (``BuildContext.layer``) type
against them, so they import neither the registry nor the interfaces.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from torch import nn

from zoo.errors import SpecError, allowed, did_you_mean
from zoo.files.safe_io import bounded_repr
from zoo.specs.options import Options

COMPONENT_FIELDS: tuple[str, ...] = ("norm", "positional", "attention", "ffn", "block")  # per layer
MODEL_PARTS: tuple[str, ...] = ("embedding", "head")  # one per model
DEFAULT_KINDS: dict[str, str] = {
    "block": "pre_norm",
    "embedding": "token",
    "head": "causal_lm",
}  # when a spec names none


def format_validation_error(error: ValidationError, prefix: str = "", allowed_keys: Iterable[str] | None = None) -> str:
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
    factory: Callable[..., Any]  # the registered kind's factory and the module class it declared
    module: type[nn.Module]
    plugin: str  # who registered the kind, for errors naming it

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

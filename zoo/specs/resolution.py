"""Components resolved against the registry: a spec's ``{"kind": ..., ...}`` validated by
the registered kind's ``Options`` (unknown keys are errors), and updates merged (a new kind
keeps only the options it also has). ``zoo.specs.model`` builds the whole-model spec on these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from zoo.errors import SpecError, allowed
from zoo.specs.components import ResolvedComponent, as_component_dict, deep_merge, format_validation_error
from zoo.specs.registry import get_registry


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


def resolve_component(slot: str, raw: Any, path: str, context: Mapping[str, Any]) -> ResolvedComponent:
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
    return ResolvedComponent(slot, str(kind), options, entry.factory, entry.module, entry.plugin)

"""JSON Schema of ModelSpec for editors, with each family's registered kinds and options."""

from __future__ import annotations

from typing import Any

from zoo.specs.model import COMPONENT_FIELDS, MODEL_PARTS, ModelSpec
from zoo.specs.registry import get_registry


def spec_json_schema() -> dict[str, Any]:
    """JSON Schema of ModelSpec with each family's registered kinds and their options."""
    schema = ModelSpec.model_json_schema()
    registry = get_registry()
    defs = schema.setdefault("$defs", {})
    for family in (*COMPONENT_FIELDS, *MODEL_PARTS):
        variants = []
        for kind in registry.kinds(family):
            options = registry.component(family, kind).options.model_json_schema()
            defs.update(options.pop("$defs", {}))
            options["properties"] = {"kind": {"const": kind}, **options.get("properties", {})}
            options["required"] = ["kind", *options.get("required", [])]
            options["additionalProperties"] = False
            options["title"] = f"{family}: {kind}"
            variants.append(options)
        schema["properties"][family] = {"anyOf": variants, "description": f"a {family} component"}
    return schema

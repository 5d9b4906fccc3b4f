"""Writing config.json: a spec is written in a family's config only when its components are of
kinds that config can describe; otherwise a ``CheckpointError`` names the layer, the part and
the kinds allowed, so ``save_pretrained`` goes on to the next family (and no writer meets a
component whose options it does not know)."""

from __future__ import annotations

from collections.abc import Collection

from zoo.errors import CheckpointError, allowed
from zoo.specs.model import ModelSpec


def require(spec: ModelSpec, model_type: str, **kinds: Collection[str]) -> None:
    """Refuse, naming the layer, a spec whose components are not of the kinds this family's
    config can describe (``attention=("gqa", ...)``, ``ffn=...``, ``norm=...``, ...)."""
    for layer in spec.layer_specs():
        for part, accepted in kinds.items():
            kind = getattr(layer, part).kind
            if kind not in accepted:
                raise CheckpointError(
                    f"spec {spec.name!r}: layers.{layer.index}.{part}.kind {kind!r} has no {model_type} "
                    f"config; allowed: {allowed(accepted)}"
                )

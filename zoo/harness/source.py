"""Where a run's model comes from, resolved once: a spec (built with random weights) or a
checkpoint (loaded), its topology decided once and carried; and the run's dtype rule.

With ``config.weights`` the checkpoint's spec is read from its config.json or GGUF metadata
before any weight is loaded, so the run is checked (shape, memory) before anything is
allocated, exactly as for a spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from zoo.analysis.counts import Topology, topology
from zoo.errors import BenchError
from zoo.harness.run_config import BenchConfig
from zoo.hub.loading import checkpoint_spec, from_pretrained
from zoo.model.build import as_spec, build, resolve_dtype
from zoo.quant import run_dtype as quant_run_dtype
from zoo.specs.model import ModelSpec


@dataclass(frozen=True)
class ModelSource:
    spec: ModelSpec
    topology: Topology
    weights: str | None = None  # a checkpoint (hub id or folder), else random weights from the spec

    def load(self, device: torch.device, dtype: torch.dtype, seed: int) -> Any:
        """The model, in eval mode: built from the spec, or the checkpoint's weights loaded."""
        if self.weights is None:
            return build(self.spec, device=device, dtype=dtype, seed=seed).eval()

        return from_pretrained(self.weights, device=device, dtype=dtype, progress=False).eval()


def resolve_source(spec: ModelSpec | str | Mapping[str, Any] | None, config: BenchConfig) -> ModelSource:
    """The run's model source: ``config.weights``'s checkpoint if given, else the spec."""
    if config.weights:
        spec = checkpoint_spec(config.weights)
    elif spec is None:
        raise BenchError("give a spec (an architecture) or weights to benchmark")

    model_spec = as_spec(spec)
    return ModelSource(model_spec, topology(model_spec), config.weights)


def run_dtype(config: BenchConfig, device: torch.device) -> torch.dtype:
    """The model's dtype: ``dtype``, else a float ``weights_dtype``, else bfloat16 for quantized
    weights or on CUDA, float32 elsewhere (``zoo.quant.run_dtype``)."""

    default = "bfloat16" if device.type == "cuda" else "float32"
    return resolve_dtype(quant_run_dtype(config.weights_dtype, config.dtype, default))

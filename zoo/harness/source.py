"""Where a run's model comes from, resolved once: a spec (built with random weights) or a
checkpoint (loaded), its topology decided once and carried; and the run's dtype rule.

With ``config.weights`` the checkpoint's spec is read from its config.json or GGUF metadata
before any weight is loaded, so the run is checked (shape, memory) before anything is
allocated, exactly as for a spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from zoo.analysis.counts import Topology, topology
from zoo.errors import BenchError
from zoo.harness.run_config import BenchConfig
from zoo.hub.loading import checkpoint_spec, from_pretrained, keeps_packed
from zoo.model.build import as_spec, build, resolve_dtype
from zoo.quant import run_dtype as quant_run_dtype
from zoo.specs.model import ModelSpec


@dataclass(frozen=True)
class ModelSource:
    spec: ModelSpec
    topology: Topology
    weights: str | None = None  # a checkpoint (hub id or folder), else random weights from the spec
    dequantize: bool = False  # a GGUF's packed matrices loaded as floats
    packed: bool = False  # the checkpoint loads into packed int4 / int8 layers (zoo.hub.loading.keeps_packed)
    model: Any = None  # a model the caller loaded or built: measured as it is, on its device and dtype

    def placement(self, config: BenchConfig) -> tuple[torch.device, torch.dtype]:
        """The run's device and dtype: a given model's own (``config`` may only repeat them),
        else ``config.device`` and ``run_dtype``."""
        from zoo.harness.environment import pick_device

        if self.model is None:
            device = pick_device(config.device)
            return device, run_dtype(config, device, self)
        device, dtype = next(self.model.parameters()).device, next(self.model.parameters()).dtype
        if config.device != "auto" and pick_device(config.device) != device:
            raise BenchError(
                f"device: the model is on {device}, not {config.device}; move it first, or leave device out"
            )
        if run_dtype(config, device) != dtype and config.dtype is not None:
            raise BenchError(
                f"dtype: the model holds {str(dtype).removeprefix('torch.')}, not {config.dtype}; "
                "convert it first, or leave dtype out"
            )
        return device, dtype

    def load(self, device: torch.device, dtype: torch.dtype, seed: int) -> Any:
        """The model, in eval mode: the one given, built from the spec, or the checkpoint's weights loaded."""
        if self.model is not None:
            return self.model.eval()
        if self.weights is None:
            return build(self.spec, device=device, dtype=dtype, seed=seed).eval()

        return from_pretrained(
            self.weights, device=device, dtype=dtype, progress=False, dequantize=self.dequantize
        ).eval()


def names_checkpoint(what: object) -> bool:
    """Whether ``zoo.bench``'s first argument names a checkpoint rather than a preset: a Path,
    a ``.gguf`` file, an existing folder, or a hub id (``org/name``; preset names hold no ``/``)."""
    if isinstance(what, Path):
        return True
    return isinstance(what, str) and ("/" in what or what.endswith(".gguf") or Path(what).expanduser().is_dir())


def model_source(model: Any, config: BenchConfig) -> tuple[ModelSource, BenchConfig]:
    """The source of a run of a model already in memory, and the config naming its checkpoint
    (so the row says what was measured and ``eval_text`` finds its tokenizer)."""
    from zoo.model.build import ZooModel

    if not isinstance(model, ZooModel):
        raise BenchError(f"expected a ZooModel, a spec, a preset name or a checkpoint path, got {type(model).__name__}")
    if config.weights_dtype is not None or config.dequantize:
        raise BenchError(
            "weights_dtype: would change the given model in place; quantize a copy "
            "(zoo.quantize) or pass the checkpoint's path"
        )
    if model.checkpoint is not None:
        config = config.model_copy(update={"weights": str(model.checkpoint)})
    return ModelSource(model.spec, topology(model.spec), config.weights, model=model), config


def resolve_source(spec: ModelSpec | str | Mapping[str, Any] | None, config: BenchConfig) -> ModelSource:
    """The run's model source: ``config.weights``'s checkpoint if given, else the spec."""
    packed = False
    if config.weights:
        spec = checkpoint_spec(config.weights)
        packed = keeps_packed(config.weights, dequantize=config.dequantize)
    elif spec is None:
        raise BenchError("give a spec (an architecture) or weights to benchmark")
    elif config.dequantize:
        raise BenchError("dequantize: only with weights (a GGUF file whose packed matrices to load as floats)")

    model_spec = as_spec(spec)
    return ModelSource(model_spec, topology(model_spec), config.weights, config.dequantize, packed)


def run_dtype(config: BenchConfig, device: torch.device, source: ModelSource | None = None) -> torch.dtype:
    """The model's dtype: ``dtype``, else a float ``weights_dtype``, else bfloat16 for quantized
    weights (given, or held packed by the checkpoint) or on CUDA, float32 elsewhere
    (``zoo.quant.run_dtype``)."""

    default = "bfloat16" if device.type == "cuda" or (source is not None and source.packed) else "float32"
    return resolve_dtype(quant_run_dtype(config.weights_dtype, config.dtype, default))

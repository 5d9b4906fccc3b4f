"""Weights as a quantized run stores them: the meta model quantized the way a run quantizes
it, and what its quantized layers save against the dense dtype (bytes held and read)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from zoo.model.build import ZooModel, as_spec, build, resolve_dtype
from zoo.quant import FLOAT_DTYPE, QUANTIZED, normalize, quantize
from zoo.quant.linear import QuantizedLinear
from zoo.specs.model import ModelSpec


def float_dtype(dtype: str | torch.dtype | None, weights_dtype: str | None) -> torch.dtype:
    """The dtype of unquantized weights: a float ``weights_dtype`` names it, else ``dtype``."""

    name = normalize(weights_dtype)
    return resolve_dtype(FLOAT_DTYPE[name] if name in FLOAT_DTYPE else dtype)


def spec_of(spec: ModelSpec | ZooModel | str | Mapping[str, Any]) -> ModelSpec:
    return spec.spec if isinstance(spec, ZooModel) else as_spec(spec)


def quantized_meta_model(spec: ModelSpec, dtype: str, weights_dtype: str | None, group_size: int | None) -> ZooModel:
    """The meta model quantized the way a run quantizes it, made once per spec and setting."""

    def make() -> ZooModel:
        model = build(spec, device="meta", dtype=dtype.removeprefix("torch."))
        return quantize(model, weights_dtype, group_size)  # type: ignore[return-value]

    return spec.derived(f"quantized_meta_model:{dtype}:{weights_dtype}:{group_size}", make)


def quantization_saving(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    dtype: str | torch.dtype | None,
    weights_dtype: str | None,
    group_size: int | None = None,
    held: nn.Module | None = None,
) -> int:
    """Bytes the quantized layers save against the same layers in ``dtype`` (0 unquantized);
    every quantized layer is read at each step, so this is also the saving in bytes read.
    ``held``: a loaded model that holds its own packed layers (a GGUF's int4 / int8): its
    layers as held, whatever ``weights_dtype`` says (the bytes ``stored_bytes`` counts)."""

    torch_dtype = resolve_dtype(dtype)
    if held is not None:
        model: nn.Module = held
    elif normalize(weights_dtype) not in QUANTIZED:
        return 0
    else:
        model = quantized_meta_model(spec_of(spec), str(torch_dtype), weights_dtype, group_size)
    return sum(m.dense_bytes(torch_dtype) - m.stored_bytes() for m in model.modules() if isinstance(m, QuantizedLinear))

"""What each declared state tensor is stored as: the dtype the cache allocates for it, read
from the same ``state_layout`` declarations the cache and ``cache_bytes`` use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.analysis.counts import meta_model
from zoo.model.build import ZooModel, resolve_dtype
from zoo.specs.model import ModelSpec


def state_dtypes(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any], dtype: str | torch.dtype | None = "bfloat16"
) -> dict[str, str]:
    """``{"slot.tensor": dtype}`` of every state tensor a model in ``dtype`` keeps, e.g. a
    bfloat16 Mamba: ``{"attention.conv": "bfloat16", "attention.ssm": "float32"}``: K/V and
    convolution windows take the cache's dtype, recurrent states float32 unless the spec's
    ``state_dtype`` is ``cache``. Layers that store one name in two dtypes list both."""
    model = meta_model(spec)
    cache_dtype = resolve_dtype(dtype)
    found: dict[str, set[str]] = {}
    for path, part in model.stateful_modules():
        slot = path.rsplit(".", 1)[-1]
        for name, tensor in part.state_layout(1, 1, 1).items():
            stored = str(tensor.dtype or cache_dtype).removeprefix("torch.")
            found.setdefault(f"{slot}.{name}", set()).add(stored)
    return {key: ", ".join(sorted(dtypes)) for key, dtypes in found.items()}

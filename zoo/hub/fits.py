"""Will a checkpoint's model fit? Asked of its spec before any loader allocates a weight.

Every path that loads a checkpoint (``from_pretrained`` of a folder, a repo id or a GGUF file,
and so ``zoo generate`` and ``zoo bench --weights``) calls ``check_weights_fit`` between
reading the spec and building the model: a config.json with ``hidden_size`` 10**8 beside
small weights is then one line naming the bytes needed and free, not an allocator traceback.
"""

from __future__ import annotations

import torch

from zoo.analysis.memory_check import check_fits
from zoo.errors import BenchError, CheckpointError
from zoo.model.build import resolve_dtype
from zoo.specs.model import ModelSpec


def check_weights_fit(spec: ModelSpec, dtype: str | torch.dtype | None, device: str | torch.device | None) -> None:
    """The model (and one token's run) fits in free memory, judged from the spec before a byte
    is allocated: a config.json with hidden_size 10**12 beside valid weights is one line."""

    target = torch.device(device) if device is not None else torch.device("cpu")
    try:
        check_fits(spec, 1, 1, 2, resolve_dtype(dtype), target)
    except BenchError as exc:
        raise CheckpointError(f"{spec.source or spec.name}: {exc}") from None

"""Analysis of what an encoder pass and an encoder-decoder's cross-attention cost: the
weights an encoder pass reads, and the cross K/V projected once from the encoder output.
Inputs of the encoder rooflines (``zoo.analysis.devices.encoder_roofline``); counted from
the built meta model and the layouts its mixers declare, as ``zoo.analysis.counts`` counts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from zoo.analysis.counts import encoder_params, meta_model, weight_bytes_read
from zoo.model.build import ZooModel, resolve_dtype
from zoo.specs.interfaces import Head, Positional
from zoo.specs.model import ModelSpec


def encoder_weight_bytes_read(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any], seq_len: int, dtype: str | torch.dtype | None = "bfloat16"
) -> int:
    """Weight bytes one encoder pass over ``seq_len`` tokens reads: an encoder-decoder's
    encoder layers (its token table is a lookup), or the whole of an encoder-only model
    (``weight_bytes_read`` at one row: a tied masked-LM head multiplies with the table, so
    it is read); of a learned position table, only the ``seq_len`` rows looked up; of a head,
    what its ``forward`` multiplies (BERT's pooler runs in ``pool``, not in ``model(ids)``)."""
    model = meta_model(spec)
    stack = model if model.encoder is None else model.encoder
    unread = sum(_params(m) - m.params_read(seq_len) for m in stack.modules() if isinstance(m, Positional))
    if model.encoder is None:
        unread += sum(_params(m) - m.forward_param_count() for m in model.modules() if isinstance(m, Head))
        return weight_bytes_read(model, 1, dtype) - unread * resolve_dtype(dtype).itemsize
    return (encoder_params(model) - unread) * resolve_dtype(dtype).itemsize


def _params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def memory_flops(spec: ModelSpec | ZooModel | str | Mapping[str, Any], memory_len: int, batch_size: int = 1) -> int:
    """FLOPs of projecting the encoder output into every cross-attention's K/V, done once
    per sequence when the cache is first given the memory (0 without cross-attention).

    Counted from the declared layouts: each element of the cross K/V (``per="memory"``) is
    one dot product over the model width, 2 FLOPs per multiply-add."""
    model = meta_model(spec)
    elements = 0
    for module in model.cross_attention_modules:
        for tensor in module.state_layout(batch_size, 1, memory_len).values():
            if tensor.per == "memory":
                elements += math.prod(tensor.shape)
    return 2 * model.spec.d_model * elements

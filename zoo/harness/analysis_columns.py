"""The analysis columns of a row, computed once by one function for every topology.

Exact figures of the spec from ``zoo.analysis.counts`` (the meta device, no memory): the
parameters and weight bytes, the cache the run allocates, the FLOPs and bytes per decode
step at the midpoint context, an encoder's FLOPs per forward. What a topology lacks is None
(an encoder keeps no cache: its KV columns are None, not 0). ``zoo bench`` puts them in its
row; a sweep puts them, for the full-size model, in each point's ``analysis``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from zoo.analysis.counts import (
    Topology,
    cache_bytes,
    count_params,
    decode_bytes_per_step,
    encoder_flops,
    forward_flops,
    weight_bytes,
)
from zoo.errors import PluginError
from zoo.harness.run_config import BenchConfig
from zoo.harness.shape import run_shape
from zoo.quant import normalize, stored_bytes
from zoo.specs.model import ModelSpec

KV_CURVE_MIN = 256  # the cache-against-context curve: powers of two from here to max_seq_len


def context_lengths(max_seq_len: int) -> list[int]:
    """Powers of two from KV_CURVE_MIN below max_seq_len, then max_seq_len."""
    lengths, length = [], KV_CURVE_MIN
    while length < max_seq_len:
        lengths.append(length)
        length *= 2
    return [*lengths, max_seq_len]


def dtype_label(weights_dtype: str | None, dtype: torch.dtype) -> str:
    """How the linear weights are stored: the quantized kind, else the float dtype (bf16 for bfloat16)."""

    return normalize(weights_dtype) or {torch.bfloat16: "bf16"}.get(dtype, str(dtype).removeprefix("torch."))


def analysis_columns(
    spec: ModelSpec, config: BenchConfig, topology: Topology, dtype: torch.dtype, held: nn.Module | None = None
) -> dict[str, Any]:
    """Every analysis column of a run of ``spec`` as ``config`` shapes it (module docstring);
    ``held``: a loaded model holding its own packed layers (a GGUF), whose weight bytes and
    bytes per decode step are the ones it holds (``zoo.quant.stored_bytes``), not the spec's."""

    count = count_params(spec)
    columns: dict[str, Any] = {
        "arch": spec.name,
        "topology": topology,
        "n_layers": spec.n_layers,
        "dtype": str(dtype).removeprefix("torch."),
        "params_total": count.total,
        "params_active": count.active,
        "params_embedding": count.embedding,
        "params_unembedding": count.unembedding,
        "weight_bytes": weight_bytes(spec, dtype, config.weights_dtype, config.weights_group_size),
        "weights_dtype": dtype_label(config.weights_dtype, dtype),
    }
    if held is not None:  # its layout ("Q4_1/Q8_0 -> int4 x210, ...; the rest bfloat16") and the bytes it holds
        columns.update(weight_bytes=stored_bytes(held), weights_dtype=held.weights_layout)
    return {
        **columns,
        **_cache_columns(spec, config, topology, dtype),
        **_flop_columns(spec, config, topology, dtype, held),
    }


def _cache_columns(spec: ModelSpec, config: BenchConfig, topology: Topology, dtype: torch.dtype) -> dict[str, Any]:
    shape = run_shape(topology, config)
    columns: dict[str, Any] = {"context_len": shape.context_len, "memory_len": shape.memory_len or None}
    if not shape.has_cache:
        return {
            **columns,
            "kv_bytes_per_token": None,
            "cross_kv_bytes_per_token": None,
            "state_bytes": None,
            "kv_bytes": None,
            "self_kv_bytes": None,
            "cross_kv_bytes": None,
        }
    M = shape.memory_len
    per = cache_bytes(spec, 1, 1, 1 if M else 0, dtype=dtype)
    run = cache_bytes(spec, shape.batch, shape.context_len, M, dtype=dtype)
    return {
        **columns,
        "kv_bytes_per_token": per.token,
        "cross_kv_bytes_per_token": per.memory if M else None,
        "state_bytes": per.sequence,
        "kv_bytes": run.total,
        "self_kv_bytes": run.token if M else None,
        "cross_kv_bytes": run.memory if M else None,
        "kv_curve": [[n, cache_bytes(spec, 1, n, M, dtype=dtype).total] for n in context_lengths(spec.max_seq_len)],
    }


def _flop_columns(
    spec: ModelSpec, config: BenchConfig, topology: Topology, dtype: torch.dtype, held: nn.Module | None
) -> dict[str, Any]:
    """FLOPs per decoded token at the midpoint (None where a plugin's mixer declares none),
    bytes per decode step there, and an encoder's FLOPs per forward of the batch."""

    shape = run_shape(topology, config)
    B, S, M, at = shape.batch, shape.encoder_len, shape.memory_len, shape.decode_midpoint
    columns: dict[str, Any] = {"flops_per_token": None, "decode_bytes_per_step": None, "encoder_flops": None}
    if S:
        columns["encoder_flops"] = encoder_flops(spec, S, B) if M else forward_flops(spec, S, S, B)
    if shape.prefill_len:
        try:
            columns["flops_per_token"] = forward_flops(spec, 1, at, memory_len=M)
        except PluginError:
            pass
        columns["decode_bytes_per_step"] = decode_bytes_per_step(
            spec, B, at, dtype, config.weights_dtype, config.weights_group_size, memory_len=M, held=held
        )
    return columns

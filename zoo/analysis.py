"""Exact analysis without memory: parameter counts and KV-cache bytes from meta-device models.

Numbers come from the modules themselves (parameters they hold, cache tensors their attention
declares), so the analysis cannot drift from what ``build`` creates.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from zoo.model import ZooModel, as_spec, build, resolve_dtype
from zoo.model_spec import ModelSpec
from zoo.registry import on_registry_change


@dataclass(frozen=True)
class ParamCount:
    """Parameter counts; tied weights are counted once.

    ``active`` is what one token touches in a forward pass, following gpt-oss's convention:
    the unembedding (LM head) counts, the input embedding (a table lookup) does not, and of
    each mixture of experts only the router, the shared experts and top_k experts count.
    With tied embeddings the shared matrix counts once, as the unembedding. Add
    ``embedding`` to ``active`` for the convention that counts both (Qwen's model cards).
    """

    total: int
    active: int
    embedding: int
    unembedding: int
    by_component: dict[str, int] = field(default_factory=dict)

    @property
    def active_with_embedding(self) -> int:
        return self.active + (self.embedding if self.unembedding else 0)

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding - self.unembedding


def _family_of(module: nn.Module, inherited: str) -> str:
    return getattr(module, "_zoo_family", inherited)


def _walk_counts(model: nn.Module) -> tuple[dict[str, int], int]:
    """Per-family counts of unique parameters, and parameters inactive per token."""
    seen: set[int] = set()
    by_family: dict[str, int] = {}
    inactive = 0

    def visit(module: nn.Module, family: str) -> None:
        nonlocal inactive
        family = _family_of(module, family)
        own = 0
        for param in module.parameters(recurse=False):
            if id(param) not in seen:
                seen.add(id(param))
                own += param.numel()
        by_family[family] = by_family.get(family, 0) + own
        active = getattr(module, "active_param_count", None)
        if callable(active):
            subtotal = sum(p.numel() for p in module.parameters())
            inactive += subtotal - int(active())
        for child in module.children():
            visit(child, family)

    visit(model, "model")
    return {k: v for k, v in by_family.items() if v}, inactive


def _model_for(spec: ModelSpec | ZooModel | str | Mapping[str, Any]) -> ZooModel:
    if isinstance(spec, ZooModel):
        return spec
    return _meta_model(as_spec(spec).to_json(indent=0))


@functools.lru_cache(maxsize=64)
def _meta_model(spec_json: str) -> ZooModel:
    import json

    return build(ModelSpec.model_validate(json.loads(spec_json)), device="meta")


on_registry_change(_meta_model.cache_clear)  # a kind a plugin replaced builds another module


def count_params(spec: ModelSpec | ZooModel | str | Mapping[str, Any]) -> ParamCount:
    """Exact parameter counts of the model a spec builds (counted on the meta device)."""
    model = _model_for(spec)
    by_family, inactive = _walk_counts(model)
    total = sum(by_family.values())
    embedding = model.embed.weight.numel()
    tied = model.lm_head.weight is model.embed.weight
    unembedding = 0 if tied else model.lm_head.weight.numel()
    if tied:  # the one matrix serves as the unembedding: active, and reported as embedding
        active = total - inactive
    else:
        active = total - inactive - embedding
    return ParamCount(total=total, active=active, embedding=embedding, unembedding=unembedding, by_component=by_family)


def kv_cache_bytes(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    batch_size: int = 1,
    seq_len: int | None = None,
    dtype: str | torch.dtype | None = "bfloat16",
) -> int:
    """Bytes of the KV cache for ``batch_size`` sequences of ``seq_len`` tokens.

    Summed from each attention module's ``cache_layout``; a sliding-window layer holds at
    most its window. ``seq_len`` defaults to the model's context length.
    """
    model = _model_for(spec)
    length = seq_len if seq_len is not None else model.spec.max_seq_len
    cache_dtype = resolve_dtype(dtype)
    return sum(
        tensor.nbytes(cache_dtype)
        for layer in model.cache_layout(batch_size, length)
        for tensor in layer.values()
    )


def kv_bytes_per_token(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any], dtype: str | torch.dtype | None = "bfloat16"
) -> int:
    """KV bytes one more token of context costs, with no window full (a 1-token cache)."""
    return kv_cache_bytes(spec, batch_size=1, seq_len=1, dtype=dtype)


def weight_bytes(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    dtype: str | torch.dtype | None = "bfloat16",
    weights_dtype: str | None = None,
    group_size: int | None = None,
) -> int:
    """Bytes of the weights as laid out (tied weights once): every parameter in ``dtype``,
    or, with ``weights_dtype`` int8/int4, the quantized layers' packed weights and scales
    (``zoo.quant.stored_bytes`` of the meta model quantized the way a run quantizes it)."""
    from zoo.quant import QUANTIZED, normalize

    if normalize(weights_dtype) not in QUANTIZED:
        return count_params(spec).total * _float_dtype(dtype, weights_dtype).itemsize
    from zoo.quant import stored_bytes

    return stored_bytes(_quantized_meta_model(_spec_json(spec), str(resolve_dtype(dtype)), weights_dtype, group_size))


def _float_dtype(dtype: str | torch.dtype | None, weights_dtype: str | None) -> torch.dtype:
    """The dtype of unquantized weights: a float ``weights_dtype`` names it, else ``dtype``."""
    from zoo.quant import FLOAT_DTYPE, normalize

    name = normalize(weights_dtype)
    return resolve_dtype(FLOAT_DTYPE[name] if name in FLOAT_DTYPE else dtype)


def _spec_json(spec: ModelSpec | ZooModel | str | Mapping[str, Any]) -> str:
    model_spec = spec.spec if isinstance(spec, ZooModel) else as_spec(spec)
    return model_spec.to_json(indent=0)


@functools.lru_cache(maxsize=32)
def _quantized_meta_model(spec_json: str, dtype: str, weights_dtype: str | None, group_size: int | None) -> ZooModel:
    import json

    from zoo.quant import quantize

    model = build(ModelSpec.model_validate(json.loads(spec_json)), device="meta", dtype=dtype.removeprefix("torch."))
    return quantize(model, weights_dtype, group_size)  # type: ignore[return-value]


on_registry_change(_quantized_meta_model.cache_clear)


def quantization_saving(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    dtype: str | torch.dtype | None,
    weights_dtype: str | None,
    group_size: int | None = None,
) -> int:
    """Bytes the quantized layers save against the same layers in ``dtype`` (0 unquantized);
    every quantized layer is read at each step, so this is also the saving in bytes read."""
    from zoo.quant import QUANTIZED, normalize
    from zoo.quant.linear import QuantizedLinear

    if normalize(weights_dtype) not in QUANTIZED:
        return 0
    torch_dtype = resolve_dtype(dtype)
    model = _quantized_meta_model(_spec_json(spec), str(torch_dtype), weights_dtype, group_size)
    return sum(
        m.dense_bytes(torch_dtype) - m.stored_bytes() for m in model.modules() if isinstance(m, QuantizedLinear)
    )


# ---- FLOPs and bytes per token (the roofline's inputs) -------------------------------------
# Families whose parameters are not matrix multiplies: norms scale, learned positions are
# looked up like the input embedding.
_NON_MATMUL_FAMILIES = ("norm", "positional")


def matmul_params(spec: ModelSpec | ZooModel | str | Mapping[str, Any]) -> int:
    """Active parameters that one token multiplies with: ``active`` (LM head included, input
    embedding excluded) minus norm scales and learned position tables."""
    count = count_params(spec)
    return count.active - sum(count.by_component.get(family, 0) for family in _NON_MATMUL_FAMILIES)


def forward_flops(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any], n_new: int, context_len: int, batch_size: int = 1
) -> int:
    """FLOPs of one forward over ``n_new`` new tokens per row ending at ``context_len``.

    2 FLOPs per multiply-add: 2 × matmul parameters per token, plus each attention
    module's own ``score_flops`` (which knows its window). Modules without that method
    make this a ``PluginError``: a silent zero would flatter the roofline.
    """
    from zoo.errors import PluginError

    model = _model_for(spec)
    attention = 0
    for index, module in enumerate(model.attention_modules):
        score_flops = getattr(module, "score_flops", None)
        if not callable(score_flops):
            raise PluginError(
                f"layers.{index}.attention: {type(module).__name__} does not declare "
                "score_flops(n_new, context_len); FLOPs per token need it (see zoo/interfaces.py)"
            )
        attention += int(score_flops(n_new, context_len))
    return batch_size * (2 * matmul_params(model) * n_new + attention)


def flops_per_token(spec: ModelSpec | ZooModel | str | Mapping[str, Any], context_len: int) -> int:
    """FLOPs to decode one token with ``context_len`` keys visible (itself included)."""
    return forward_flops(spec, 1, context_len)


def weight_bytes_read(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    batch_size: int = 1,
    dtype: str | torch.dtype | None = "bfloat16",
    weights_dtype: str | None = None,
    group_size: int | None = None,
) -> int:
    """Weight bytes one forward step reads: the active parameters at batch 1; with more
    rows a mixture of experts touches more experts, bounded by every weight except the
    input-embedding table (of which only the looked-up rows are read). Quantized layers
    are read as stored (``quantization_saving`` less)."""
    count = count_params(spec)
    readable = count.total - (count.embedding if count.unembedding else 0)
    dense = min(readable, count.active * batch_size) * _float_dtype(dtype, weights_dtype).itemsize
    return dense - quantization_saving(spec, dtype, weights_dtype, group_size)


def decode_bytes_per_step(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    batch_size: int,
    context_len: int,
    dtype: str | torch.dtype | None = "bfloat16",
    weights_dtype: str | None = None,
    group_size: int | None = None,
) -> int:
    """Bytes one decode step reads: the weights it uses plus the KV cache at that context."""
    weights = weight_bytes_read(spec, batch_size, dtype, weights_dtype, group_size)
    return weights + kv_cache_bytes(spec, batch_size, context_len, dtype)

"""Exact analysis without memory: parameter counts and cache bytes from meta-device models.

Numbers come from the modules themselves (parameters they hold, the state tensors each
token mixer declares, the capabilities each class declared when its plugin registered),
so the analysis cannot drift from what ``build`` creates.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from zoo.errors import SpecError
from zoo.interfaces import FeedForward
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
        if isinstance(module, FeedForward):  # outermost FFN only: its count covers its children
            inactive += sum(p.numel() for p in module.parameters()) - module.active_param_count()
            for child in module.children():
                visit_counts_only(child, family)
            return
        for child in module.children():
            visit(child, family)

    def visit_counts_only(module: nn.Module, family: str) -> None:
        family = _family_of(module, family)
        for param in module.parameters(recurse=False):
            if id(param) not in seen:
                seen.add(id(param))
                by_family[family] = by_family.get(family, 0) + param.numel()
        for child in module.children():
            visit_counts_only(child, family)

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


@dataclass(frozen=True)
class CacheBytes:
    """Cache bytes by how they grow (``StateTensor.per``): ``token`` for the time slots at
    this context (K/V, latents; windows capped), ``sequence`` for fixed per-sequence state
    (recurrent state, convolution windows), ``memory`` for cross-attention K/V of the
    encoder tokens."""

    token: int
    sequence: int
    memory: int

    @property
    def total(self) -> int:
        return self.token + self.sequence + self.memory


def cache_bytes(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    batch_size: int = 1,
    context_len: int | None = None,
    memory_len: int = 0,
    dtype: str | torch.dtype | None = "bfloat16",
) -> CacheBytes:
    """Bytes of the cache for ``batch_size`` sequences of ``context_len`` tokens (default:
    the model's context length) and ``memory_len`` encoder tokens, summed from every
    stateful module's ``state_layout``: the one call every part of the harness uses."""
    model = _model_for(spec)
    length = context_len if context_len is not None else model.spec.max_seq_len
    if batch_size < 1 or length < 1 or memory_len < 0:
        raise SpecError(f"cache_bytes: batch_size={batch_size} and context_len={length} must be >= 1, memory_len >= 0")
    cache_dtype = resolve_dtype(dtype)
    sums = {"token": 0, "sequence": 0, "memory": 0}
    for layout in model.state_layout(batch_size, length, memory_len):
        for tensor in layout.values():
            sums[tensor.per] += tensor.nbytes(cache_dtype)
    return CacheBytes(**sums)


def kv_cache_bytes(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    batch_size: int = 1,
    seq_len: int | None = None,
    dtype: str | torch.dtype | None = "bfloat16",
    memory_len: int = 0,
) -> int:
    """Total cache bytes at ``seq_len`` tokens: ``cache_bytes(...).total``."""
    return cache_bytes(spec, batch_size, seq_len, memory_len, dtype).total


def kv_bytes_per_token(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any], dtype: str | torch.dtype | None = "bfloat16"
) -> int:
    """Bytes one more token of context costs (per-token tensors, no window full); state
    that is fixed per sequence is ``state_bytes``, not counted here."""
    return cache_bytes(spec, 1, 1, 0, dtype).token


def state_bytes(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    batch_size: int = 1,
    dtype: str | torch.dtype | None = "bfloat16",
) -> int:
    """Bytes of the state fixed per sequence (recurrent state), whatever the context."""
    return cache_bytes(spec, batch_size, 1, 0, dtype).sequence


def cross_kv_bytes(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    memory_len: int,
    batch_size: int = 1,
    dtype: str | torch.dtype | None = "bfloat16",
) -> int:
    """Bytes of the cross-attention K/V for ``memory_len`` encoder tokens."""
    return cache_bytes(spec, batch_size, 1, memory_len, dtype).memory


def weight_bytes(spec: ModelSpec | ZooModel | str | Mapping[str, Any], dtype: str | torch.dtype | None = "bfloat16") -> int:
    """Bytes of the weights in ``dtype`` (tied weights once)."""
    return count_params(spec).total * resolve_dtype(dtype).itemsize


# ---- FLOPs and bytes per token (the roofline's inputs) -------------------------------------
# Families whose parameters are not matrix multiplies: norms scale, learned positions are
# looked up like the input embedding.
_NON_MATMUL_FAMILIES = ("norm", "positional")


def matmul_params(spec: ModelSpec | ZooModel | str | Mapping[str, Any]) -> int:
    """Active parameters that one token multiplies with: ``active`` (LM head included, input
    embedding excluded) minus norm scales and learned position tables."""
    count = count_params(spec)
    return count.active - sum(count.by_component.get(family, 0) for family in _NON_MATMUL_FAMILIES)


def _head_matmul_params(model: ZooModel) -> int:
    """Parameters of the output head (its table counted even when tied): the part of a
    forward that runs only on the rows whose logits are asked for."""
    return sum(
        sum(p.numel() for p in module.parameters())
        for module in model.modules()
        if getattr(module, "_zoo_family", None) == "unembedding"
    )


def forward_flops(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    n_new: int,
    context_len: int,
    batch_size: int = 1,
    *,
    last_only: bool = False,
) -> int:
    """FLOPs of one forward over ``n_new`` new tokens per row ending at ``context_len``.

    2 FLOPs per multiply-add: 2 × matmul parameters per token, except the head, which
    runs on the last row only when ``last_only`` (as prefill does), plus each token
    mixer's declared ``score_flops`` (which knows its window, or its state update).
    """
    model = _model_for(spec)
    mixing = sum(int(module.score_flops(n_new, context_len)) for _, module in model.stateful_modules())
    head = _head_matmul_params(model)
    head_rows = 1 if last_only else n_new
    return batch_size * (2 * (matmul_params(model) - head) * n_new + 2 * head * head_rows + mixing)


def flops_per_token(spec: ModelSpec | ZooModel | str | Mapping[str, Any], context_len: int) -> int:
    """FLOPs to decode one token with ``context_len`` keys visible (itself included)."""
    return forward_flops(spec, 1, context_len)


def weight_bytes_read(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any], batch_size: int = 1, dtype: str | torch.dtype | None = "bfloat16"
) -> int:
    """Weight bytes one forward step reads: the active parameters at batch 1; with more
    rows a mixture of experts touches more experts, bounded by every weight except the
    input-embedding table (of which only the looked-up rows are read)."""
    count = count_params(spec)
    readable = count.total - (count.embedding if count.unembedding else 0)
    return min(readable, count.active * batch_size) * resolve_dtype(dtype).itemsize


def decode_bytes_per_step(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    batch_size: int,
    context_len: int,
    dtype: str | torch.dtype | None = "bfloat16",
) -> int:
    """Bytes one decode step reads: the weights it uses plus the whole cache at that context."""
    return weight_bytes_read(spec, batch_size, dtype) + cache_bytes(spec, batch_size, context_len, 0, dtype).total

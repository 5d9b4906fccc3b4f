"""Exact analysis without memory: parameter counts and cache bytes from meta-device models.

Numbers come from the modules themselves (parameters they hold, the state tensors each
token mixer declares, the capabilities each class declared when its plugin registered),
so the analysis cannot drift from what ``build`` creates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from zoo.analysis.quantized import float_dtype, quantization_saving, quantized_meta_model, spec_of
from zoo.errors import SpecError
from zoo.model.build import ZooModel, as_spec, build, resolve_dtype
from zoo.quant import QUANTIZED, normalize, stored_bytes
from zoo.specs.interfaces import FeedForward, Head, Mixer
from zoo.specs.model import ModelSpec


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
    tied: bool = False  # the head shares the embedding table

    @property
    def active_with_embedding(self) -> int:
        return self.active + (0 if self.tied else self.embedding)

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding - self.unembedding


def _walk_counts(model: ZooModel, part: str = "") -> tuple[dict[str, int], int]:
    """Per-family counts of the unique parameters of ``model``'s submodule at ``part`` (all
    of it by default), by the family each module path was built as (``ZooModel.part_families``,
    inherited by its children), and the parameters inactive per token."""
    seen: set[int] = set()
    by_family: dict[str, int] = {}
    inactive = 0
    families = model.part_families

    def visit(module: nn.Module, family: str, path: str) -> None:
        nonlocal inactive
        family = families.get(path, family)
        own = 0
        for param in module.parameters(recurse=False):
            if id(param) not in seen:
                seen.add(id(param))
                own += param.numel()
        by_family[family] = by_family.get(family, 0) + own
        if isinstance(module, FeedForward):  # outermost FFN only: its count covers its children
            inactive += sum(p.numel() for p in module.parameters()) - module.active_param_count()
            for name, child in module.named_children():
                visit_counts_only(child, family, f"{path}.{name}")
            return
        for name, child in module.named_children():
            visit(child, family, f"{path}.{name}" if path else name)

    def visit_counts_only(module: nn.Module, family: str, path: str) -> None:
        family = families.get(path, family)
        for param in module.parameters(recurse=False):
            if id(param) not in seen:
                seen.add(id(param))
                by_family[family] = by_family.get(family, 0) + param.numel()
        for name, child in module.named_children():
            visit_counts_only(child, family, f"{path}.{name}")

    visit(model.get_submodule(part), "model", part)
    return {k: v for k, v in by_family.items() if v}, inactive


def _model_for(spec: ModelSpec | ZooModel | str | Mapping[str, Any]) -> ZooModel:
    if isinstance(spec, ZooModel):
        return spec
    model_spec = as_spec(spec)
    return model_spec.derived("meta_model", lambda: build(model_spec, device="meta"))


def meta_model(spec: ModelSpec | ZooModel | str | Mapping[str, Any]) -> ZooModel:
    """The model a spec builds, on the meta device (made once per spec): for inspecting
    structure without allocating."""
    return _model_for(spec)


Topology = Literal["decoder", "encoder", "encoder-decoder"]  # the one list of model topologies


def topology(spec: ModelSpec | ZooModel | str | Mapping[str, Any]) -> Topology:
    """``encoder-decoder`` (two stacks), ``decoder`` (generates: causal self-mixers and a
    head giving logits) or ``encoder`` (a forward only: no cache). The one place deciding it."""
    model = _model_for(spec)
    return "encoder-decoder" if model.encoder is not None else "decoder" if model.can_generate else "encoder"


def count_params(spec: ModelSpec | ZooModel | str | Mapping[str, Any]) -> ParamCount:
    """Exact parameter counts of the model a spec builds (counted on the meta device)."""
    model = _model_for(spec)
    by_family, inactive = _walk_counts(model)
    total = sum(by_family.values())
    embedding = by_family.get("embedding", 0)  # token (and token-type) tables
    unembedding = by_family.get("unembedding", 0)  # the head's own parameters (a tied table is the embedding's)
    tied = model.head_tied
    # a tied table serves as the unembedding: active (reported as embedding); an untied
    # input table is a lookup, not a multiply
    active = total - inactive - (0 if tied else embedding)
    return ParamCount(
        total=total, active=active, embedding=embedding, unembedding=unembedding, by_component=by_family, tied=tied
    )


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


def weight_bytes(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    dtype: str | torch.dtype | None = "bfloat16",
    weights_dtype: str | None = None,
    group_size: int | None = None,
) -> int:
    """Bytes of the weights as laid out (tied weights once): every parameter in ``dtype``,
    or, with ``weights_dtype`` int8/int4, the quantized layers' packed weights and scales
    (``zoo.quant.stored_bytes`` of the meta model quantized the way a run quantizes it)."""

    if normalize(weights_dtype) not in QUANTIZED:
        return count_params(spec).total * float_dtype(dtype, weights_dtype).itemsize
    return stored_bytes(quantized_meta_model(spec_of(spec), str(resolve_dtype(dtype)), weights_dtype, group_size))


# ---- FLOPs and bytes per token (the roofline's inputs) -------------------------------------
# Families whose parameters are not matrix multiplies: norms scale, learned positions are
# looked up like the input embedding.
_NON_MATMUL_FAMILIES = ("norm", "positional")


def _mixers(module: nn.Module) -> list[Mixer]:
    return [m for m in module.modules() if isinstance(m, Mixer)]


def _not_per_token(module: nn.Module) -> int:
    """Mixer parameters not multiplied as matrix weights per token: elementwise ones (counted
    in ``score_flops``) and memory projections (once per prompt, ``memory_flops``)."""
    return sum(
        sum(p.numel() for p in m.parameters()) - m.matmul_param_count() + m.memory_param_count()
        for m in _mixers(module)
    )


def memory_params(spec: ModelSpec | ZooModel | str | Mapping[str, Any]) -> int:
    """Parameters projecting the encoder's memory into cross-attention K/V: run once per
    prompt, so neither charged nor read on a cached decode step (0 without cross-attention)."""
    return sum(m.memory_param_count() for m in _model_for(spec).cross_attention_modules)


def matmul_params(spec: ModelSpec | ZooModel | str | Mapping[str, Any]) -> int:
    """Active parameters that one token multiplies with: ``active`` (LM head included, input
    embedding excluded) minus norm scales, learned position tables, mixers' elementwise
    parameters and cross-attention's memory projections."""
    model = _model_for(spec)
    count = count_params(model)
    return count.active - sum(count.by_component.get(f, 0) for f in _NON_MATMUL_FAMILIES) - _not_per_token(model)


def _head_params(model: ZooModel) -> tuple[int, int]:
    """Parameters of the output head (its table counted even when tied), and of those the
    ones its ``forward`` multiplies per row returned: the part that runs on asked rows only."""
    heads = [m for m in model.modules() if isinstance(m, Head)]
    return sum(sum(p.numel() for p in m.parameters()) for m in heads), sum(m.forward_param_count() for m in heads)


def _matmul_params_of(model: ZooModel, part: str, lookups: tuple[str, ...] = ()) -> int:
    """Parameters of ``model``'s ``part`` multiplied per token, less norms, position tables
    and ``lookups`` families."""
    by_family, inactive = _walk_counts(model, part)
    lookup = sum(by_family.get(f, 0) for f in _NON_MATMUL_FAMILIES + lookups)
    return sum(by_family.values()) - inactive - lookup - _not_per_token(model.get_submodule(part))


def forward_flops(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    n_new: int,
    context_len: int,
    batch_size: int = 1,
    *,
    last_only: bool = False,
    memory_len: int = 0,
    executed: bool = False,
) -> int:
    """FLOPs of one cached (decoder) forward over ``n_new`` new tokens per row ending at
    ``context_len``, attending to ``memory_len`` encoder tokens (encoder-decoders).

    2 FLOPs per multiply-add: 2 × matmul parameters per token (the encoder's excluded: see
    ``encoder_flops``; cross-attention K/V projections run once per prompt: ``memory_flops``),
    except the head, which runs on the last row only when ``last_only`` (as prefill does),
    plus each token mixer's declared ``score_flops`` (which knows its window, or its state
    update); cross-attention sees ``memory_len`` keys. ``executed``: the mixers'
    ``executed_score_flops`` instead (a chunked prefill scan does more than the recurrence's
    minimum): model FLOPs (MFU) by default, executed FLOPs for the roofline.
    """
    model = _model_for(spec)

    def mixing(module: Mixer, keys: int) -> int:
        return int(module.executed_score_flops(n_new, keys) if executed else module.score_flops(n_new, keys))

    scores = sum(mixing(module, context_len) for module in model.attention_modules)
    scores += sum(mixing(module, memory_len) for module in model.cross_attention_modules)
    head, head_forward = _head_params(model)
    head_rows = 1 if last_only else n_new
    # the encoder's layers (its embedding is the model's tied table, counted at the model level)
    encoder = 0 if model.encoder is None else _matmul_params_of(model, "encoder", ("embedding",))
    return batch_size * (2 * (matmul_params(model) - encoder - head) * n_new + 2 * head_forward * head_rows + scores)


def encoder_flops(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    memory_len: int,
    batch_size: int = 1,
    *,
    executed: bool = False,
) -> int:
    """FLOPs of an encoder-decoder's encoder over ``memory_len`` tokens per row (0 without one)."""
    model = _model_for(spec)
    if model.encoder is None:
        return 0
    mixing = 0
    for module in _mixers(model.encoder):
        flops = module.executed_score_flops if executed else module.score_flops
        mixing += int(flops(memory_len, memory_len))
    # the encoder's embedding (its tied token table) is a lookup, not a product
    return batch_size * (2 * _matmul_params_of(model, "encoder", ("embedding",)) * memory_len + mixing)


def flops_per_token(spec: ModelSpec | ZooModel | str | Mapping[str, Any], context_len: int) -> int:
    """FLOPs to decode one token with ``context_len`` keys visible (itself included)."""
    return forward_flops(spec, 1, context_len)


def weight_bytes_read(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    batch_size: int = 1,
    dtype: str | torch.dtype | None = "bfloat16",
    weights_dtype: str | None = None,
    group_size: int | None = None,
    held: nn.Module | None = None,
) -> int:
    """Weight bytes one cached (decoder) forward step reads: the active parameters at batch 1;
    with more rows a mixture of experts touches more experts, bounded by every weight except
    the input-embedding table (of which only the looked-up rows are read). An
    encoder-decoder's encoder layers (``encoder_weight_bytes_read``) and its cross-attention
    K/V projections (run once per prompt) are not read by a decode step. Quantized layers
    are read as stored (``quantization_saving`` less), those of a ``held`` model (a loaded
    GGUF's packed layers) as it holds them."""
    count = count_params(spec)
    unread = encoder_params(spec) + memory_params(spec)
    readable = count.total - unread - (0 if count.tied else count.embedding)
    dense = min(readable, (count.active - unread) * batch_size) * float_dtype(dtype, weights_dtype).itemsize
    return dense - quantization_saving(spec, dtype, weights_dtype, group_size, held)


def decode_bytes_per_step(
    spec: ModelSpec | ZooModel | str | Mapping[str, Any],
    batch_size: int,
    context_len: int,
    dtype: str | torch.dtype | None = "bfloat16",
    weights_dtype: str | None = None,
    group_size: int | None = None,
    memory_len: int = 0,
    held: nn.Module | None = None,
) -> int:
    """Bytes one decode step moves: the weights it uses (``held``: as a loaded model holds
    them), the K/V cache at that context read
    (with ``memory_len`` encoder tokens, the cross-attention K/V too: read every step), and
    the state fixed per sequence (recurrent state, convolution windows) read and written back."""
    weights = weight_bytes_read(spec, batch_size, dtype, weights_dtype, group_size, held)
    cache = cache_bytes(spec, batch_size, context_len, memory_len, dtype)
    return weights + cache.token + cache.memory + 2 * cache.sequence


def encoder_params(spec: ModelSpec | ZooModel | str | Mapping[str, Any]) -> int:
    """Parameters of an encoder-decoder's encoder layers, less its (shared) token table and
    inactive experts: what an encoder pass reads besides the looked-up rows (0 without one)."""
    model = _model_for(spec)
    if model.encoder is None:
        return 0
    by_family, inactive = _walk_counts(model, "encoder")
    return sum(by_family.values()) - inactive - by_family.get("embedding", 0)

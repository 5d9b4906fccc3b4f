"""One query's attention on the CPU: zoo's C++ kernel for a decode step's attention.

A decode step attends one query per sequence over the cached keys and values. torch's CPU
kernel (flash attention for the CPU) is built for blocks of queries; for one it ran 1.7-10x
as long as zoo's loop (``one_query_attention`` of zoo/components/cpu_attention_calls_source.py,
built in the one-row products' extension so that it costs no build of its own), which reads
each key/value head's rows once, in their dtype, for the head's whole group of query heads,
and skips masked keys (a compiled step's static cache masks the slots not yet written):
``python bench/one_query_attention.py`` on this project's Zen 4, 30 layers timed after the
caches were evicted, torch / zoo time per layer at one thread (two): SmolLM2-135M's shapes
(9 query and 3 K/V heads of 64, bfloat16, 135 keys written of 260 slots) 3.23x (3.49x)
masked and 2.28x (2.91x) sliced; gpt2's (12 heads of 64, float32) 2.55x (2.08x) and 1.91x
(1.67x); qwen3-0.6b's (16 and 8 heads of 128, float32) 3.40x (3.26x) and 2.26x (2.08x);
2,048 keys of 4,096 in bfloat16 10.4x (7.8x) and 4.2x (3.9x).

An eager decode step writes its token's K/V and attends in one call (``append_and_attend``):
the cached path's ``index_copy_`` pair, slices, casts and checks took more host time than
the attention (SmolLM2-135M's step: 63.8 against 42.2 µs per layer for the whole cached
attention, the step 1.02x over 21 interleaved rounds). With the step's rotary tables
(``CacheWrite.rotation``) the same call rotates q and k first, k straight into its cache slot:
the attention module went from 84.5 to 73.7 µs per call on SmolLM2-135M's shapes (one
thread, hot caches; 79.5 to 69.7 at two).

A step's whole attention for one token is one call too (``attention_token``: the q|k|v and
output products, q/k norms and ``append_attention`` in C++; ``cross_attention_token`` for a
decoder's attention over the encoder's memory), taken by ``Attention._token_step`` and
``CrossAttention._token_step``: the Python between those calls was ~60-100 µs a gpt2 layer on a
2-core Xeon (``python bench/layer_steps.py``: bfloat16 decode 1.09x gpt2, 1.11x qwen3-0.6b,
1.20x t5-small, with the feed-forward's ``mlp_token``).

Numerics: scores, softmax and the weighted sum in float32, rounded once to the query's
dtype (torch's kernel for half precision accumulates likewise). ``ZOO_ATTENTION_KERNEL=0``
turns it off. Inside a compiled graph it is the opaque op
``torch.ops.zoo.row_product_one_query_attention``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from zoo.components import row_product
from zoo.components.cpu_token_ops import pre_norm_args
from zoo.components.linear import StepTensors
from zoo.specs.interfaces import TokenNorm

ENV_SWITCH = "ZOO_ATTENTION_KERNEL"
# the switch, read once when this module imports: an eager decode step asks before every
# call, and ``os.environ.get`` costs 0.7 µs (1.4% of SmolLM2-135M's step at two threads);
# a test or benchmark sets ``ENABLED`` itself
ENABLED = os.environ.get(ENV_SWITCH, "1") != "0"
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
OPTIONS = frozenset({"attn_mask", "scale", "enable_gqa", "is_causal"})
STEP_OPTIONS = frozenset({"attn_mask", "scale"})  # attention_token's: a scale, and a mask or none
OP_NAME = row_product.EXTENSION.op_name("one_query_attention")  # zoo::row_product_one_query_attention


def applies(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, options: dict[str, Any]) -> bool:
    """Whether ``F.scaled_dot_product_attention(q, k, v, **options)`` is one the kernel computes:
    one query on the CPU outside autograd, rows contiguous, one dtype, no causal flag (one
    query sees every key it is given), a boolean or additive mask or none, and the switch not off."""
    return _computes(q, k, v, k.shape[2], options)


@dataclass(slots=True)
class CacheWrite:
    """An eager step's new token per sequence: its keys and values (B, Hkv, 1, D) and the caches
    (B, Hkv, L, D) they go to, at slot ``filled - 1`` (``filled``: the slots written with it).
    ``rotation``: the step's rotary tables (cos, signed_sin), each (B|1, 1, 1, R), when q and
    k are still to be rotated (``Rotation.half_split``); the call rotates them on the way."""

    k: torch.Tensor
    v: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    filled: int
    rotation: tuple[torch.Tensor, torch.Tensor] | None = None


def appends(q: torch.Tensor, write: CacheWrite, options: dict[str, Any]) -> bool:
    """Whether ``append_and_attend`` computes this eager step: one new key and value per
    sequence in the caches' dtype, gradients off, and the kernel computing q's attention over
    the caches' first ``filled`` slots (``applies``)."""
    k, v, k_cache, v_cache = write.k, write.v, write.k_cache, write.v_cache
    return (
        k.shape == v.shape
        and k.dim() == 4
        and k.shape[2] == 1
        and k.shape[:2] == k_cache.shape[:2]
        and k.shape[3] == k_cache.shape[3]
        and k_cache.shape == v_cache.shape
        and 1 <= write.filled <= k_cache.shape[2]
        and k.dtype == v.dtype == k_cache.dtype == v_cache.dtype
        and k.stride(-1) == v.stride(-1) == 1
        and k.is_cpu
        and k_cache.is_cpu
        and v_cache.is_cpu
        and not torch.is_grad_enabled()
        and (write.rotation is None or _rotates(write.rotation, k))
        and _computes(q, k_cache, v_cache, write.filled, options)
    )


@dataclass(slots=True)
class TokenStep:
    """An eager step's whole attention for one token (``attention_token``): the fused q|k|v
    projection ((H + 2 Hkv) D, C) and the output projection (C_out, H D) as their layers give
    them (``RowStackable.step_tensors``: weight, int8 scales or None, bias), q and k's RMS norms
    (weights (D,), eps, unit offset) where the layer has them, the caches (1, Hkv, L, D) with
    ``filled`` slots written with this token, and the step's rotary tables as in ``CacheWrite``."""

    qkv: StepTensors
    norms: tuple[torch.Tensor, torch.Tensor, float, bool] | None
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    filled: int
    rotation: tuple[torch.Tensor, torch.Tensor] | None
    o: StepTensors


def attention_token(
    x: torch.Tensor, step: TokenStep, options: dict[str, Any], norm: TokenNorm | None = None
) -> torch.Tensor | None:
    """x (1, 1, C) -> the layer's attention output (1, 1, C_out) in one C++ call, or None where
    the call does not compute it (nothing written then). The q|k|v product, q and k's norms,
    the cache write, rotation and attention and the output product are each the kernel the
    module calls one by one (``row_product`` or ``int8_rows``, ``rms_norm``,
    ``append_and_attend``), so the result is theirs bit for bit; an eager step paid ~60 µs of
    Python and small torch calls a gpt2 layer between them (2-core Xeon). The C++ checks every
    shape, dtype and layout (``attention_fits``: in Python those checks cost 15 µs a call); here
    only what it cannot know: gradients off, the switch on, options it takes (each projection's
    kernel: ``step_tensors``). With ``norm``: ``x + attention(norm(x))``, a pre-norm block's
    branch (``cpu_token_ops.pre_norm_args``)."""
    if torch.is_grad_enabled() or not ENABLED or not options.keys() <= STEP_OPTIONS or not row_product.available():
        return None  # (an eager call only: a compiled step's cache has no ``filled``, so it never gets here)
    q_norm, k_norm, eps, unit = (None, None, 0.0, False) if step.norms is None else step.norms
    cos, sin = (None, None) if step.rotation is None else step.rotation
    caches = (step.k_cache, step.v_cache, step.filled, cos, sin, options.get("attn_mask"), options["scale"])
    args = (x, *step.qkv, q_norm, k_norm, eps, unit, *caches, *step.o, *pre_norm_args(norm), row_product.PastCache.on)
    call = row_product.EXTENSION.op("attention_token")
    if torch.autograd._profiler_enabled():
        with torch.profiler.record_function(OP_NAME):  # the attention within it, as ``_run`` names it
            return call(*args)
    return call(*args)


def cross_attention_token(
    x: torch.Tensor,
    q_proj: StepTensors,
    memory: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None],
    scale: float,
    o_proj: StepTensors,
    norm: TokenNorm | None = None,
) -> torch.Tensor | None:
    """x (1, 1, C) -> a decoder layer's cross-attention output (1, 1, C_out) in one C++ call: the
    query product, the heads over the memory's keys and values (1, Hkv, M, D) with its boolean
    mask (1, 1, 1, M) or None, and the output product (each projection as its layer's
    ``step_tensors`` give it), each the kernel the module calls, or None where the call does not
    compute it (checked in C++, as for ``attention_token``). Eager calls only: a graph being
    compiled keeps the module's calls (its products and attention as their own opaque ops), as
    a declined call has no graph value. With ``norm``: x + the cross-attention of norm(x)."""
    if torch.is_grad_enabled() or not ENABLED or torch.compiler.is_compiling() or not row_product.available():
        return None
    args = (x, *q_proj, *memory, scale, *o_proj, *pre_norm_args(norm), row_product.PastCache.on)
    call = row_product.EXTENSION.op("cross_attention_token")
    if torch.autograd._profiler_enabled():
        with torch.profiler.record_function(OP_NAME):  # the attention within it, as ``_run`` names it
            return call(*args)
    return call(*args)


def _rotates(tables: tuple[torch.Tensor, torch.Tensor], k: torch.Tensor) -> bool:
    """Rotary tables cos, signed_sin (B|1, 1, 1, R) in k's dtype, R even and at most D."""
    cos, sin = tables
    return (
        cos.shape == sin.shape
        and cos.dim() == 4
        and cos.shape[1:3] == (1, 1)
        and cos.shape[0] in (1, k.shape[0])
        and cos.shape[3] % 2 == 0
        and cos.shape[3] <= k.shape[3]
        and cos.dtype == sin.dtype == k.dtype
        and cos.is_cpu
        and sin.is_cpu
    )


def _computes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: int, options: dict[str, Any]) -> bool:
    """``applies`` for q over the first ``keys`` rows of k and v."""
    mask = options.get("attn_mask")
    return (
        q.is_cpu
        and q.dim() == 4
        and q.shape[2] == 1
        and q.dtype in DTYPES
        and k.dtype == v.dtype == q.dtype
        and k.shape == v.shape
        and q.shape[1] % k.shape[1] == 0
        and q.stride(-1) == k.stride(-1) == v.stride(-1) == 1
        and options.keys() <= OPTIONS
        and not options.get("is_causal", False)
        and (mask is None or _mask_fits(mask, q, keys))
        and not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))
        and ENABLED
        and row_product.available()
    )


def _mask_fits(mask: torch.Tensor, q: torch.Tensor, keys: int) -> bool:
    """A boolean mask (B|1, 1, 1, S), or an additive one (B|1, H|1, 1, S): a position bias
    (T5's relative buckets, ALiBi) with -inf where a key is masked."""
    if mask.dim() != 4 or mask.shape[2:] != (1, keys) or mask.shape[0] not in (1, q.shape[0]):
        return False
    if mask.dtype == torch.bool:
        return mask.shape[1] == 1
    return mask.is_floating_point() and mask.shape[1] in (1, q.shape[1])


def one_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, options: dict[str, Any]) -> torch.Tensor:
    """q (B, H, 1, D) over k, v (B, Hkv, S, D), mask (B|1, 1, 1, S) bool, (B|1, H|1, 1, S)
    floating or None -> (B, H, 1, D)."""
    return _run("one_query_attention", q, (k, v), options)


def append_and_attend(q: torch.Tensor, write: CacheWrite, options: dict[str, Any]) -> torch.Tensor:
    """The new k, v written to slot ``filled - 1`` of the caches, then q (B, H, 1, D) over their
    first ``filled`` slots -> (B, H, 1, D), in one C++ call (q and k rotated first with a
    ``rotation``): an eager step's cache writes, slices, rotations and checks cost more than
    its attention did (module doc)."""
    cos, sin = (None, None) if write.rotation is None else write.rotation
    tensors = (write.k, write.v, write.k_cache, write.v_cache, write.filled, cos, sin)
    return _run("append_attention", q, tensors, options)


def _run(function: str, q: torch.Tensor, tensors: tuple[Any, ...], options: dict[str, Any]) -> torch.Tensor:
    """The extension's ``function`` on (q, *tensors, mask, scale)."""
    scale = options.get("scale")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    call = row_product.EXTENSION.op(function)
    if not torch.compiler.is_compiling() and torch.autograd._profiler_enabled():
        # eager calls skip the dispatcher; named here, a run's profile (sdpa_backend) sees them as a graph's op
        with torch.profiler.record_function(OP_NAME):
            return call(q, *tensors, options.get("attn_mask"), scale)
    return call(q, *tensors, options.get("attn_mask"), scale)

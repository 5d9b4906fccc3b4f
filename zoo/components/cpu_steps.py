"""One-token decode steps of the recurrent mixers as fused C++ calls: the ``cpu-step`` kernel.

A decode step of Mamba2, Gated DeltaNet, linear attention or Infini-attention in PyTorch is a
few GEMVs (the projections) plus 50 to 140 more dispatched ops (views included): splits,
reshapes, the convolution window's concatenation and copy, exponentials, norms, gathers,
each a dispatch of microseconds over a few kilobytes. Here everything between
the input and the output projections is one call (``cpu_steps_source``): the state is read
and written once in place and nothing is materialised but the output. An eager batch-1 step of
Mamba2, Gated DeltaNet, linear or Infini-attention takes its projections into that call too
(``mamba2_token``, ``gdn_token``, ``linear_token``, ``infini_token``: the one-row products'
kernels, the same bits); elsewhere the projections are the layers' own calls.

Each function is a custom op (``cpu_ops``: ``torch.ops.zoo.cpu_steps_mamba2_step`` and so
on, the state tensors declared as written in place), so a compiled decode step calls the same
C++ as an eager one. ``step_ready`` is the gate each mixer asks first: the kernel is for
inference (no autograd), float32 state tensors (``state_dtype: cache`` with a float32 cache
included; a half-precision state runs the reference), a CPU tensor (on another device the
mixer resolves to its reference or that device's kernel) and a token that is real in every
row (a padding token in a decode step runs the reference; inside a graph, where that cannot
be read without a sync, any padding mask does). Mamba-1 has its own fused scan
(``cpu_scan``, prefill and step alike).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from zoo.components import cpu_token_ops, row_product
from zoo.components.cpu_ops import CppExtension, CppFunction
from zoo.components.cpu_steps_source import SOURCE
from zoo.components.cpu_token_steps_source import TOKEN_STEPS
from zoo.components.feature_state import EPS
from zoo.components.kernels import Kernel, KernelChoice
from zoo.components.linear import StepTensors
from zoo.specs.interfaces import TokenNorm


def _heads_out(state: torch.Tensor, per_head: int, like: torch.Tensor) -> torch.Tensor:
    return like.new_empty(state.shape[0], state.shape[1] * state.shape[per_head])  # (B, H * width)


EXTENSION = CppExtension(
    "zoo_cpu_steps",
    SOURCE + row_product.PROJECTIONS + TOKEN_STEPS,
    [
        CppFunction(
            "mamba2_step",
            "(Tensor proj, Tensor conv_w, Tensor conv_b, Tensor(a!) window, Tensor dt_bias, Tensor A_log, "
            "Tensor D, Tensor norm_w, Tensor(b!) state, int groups, float eps, float dt_min, float dt_max) -> Tensor",
            lambda proj, state, **_: _heads_out(state, 2, proj),  # (B, H P)
        ),
        CppFunction(
            "gdn_step",
            "(Tensor qkvz, Tensor ba, Tensor conv_w, Tensor(a!) window, Tensor dt_bias, Tensor A_log, "
            "Tensor norm_w, Tensor(b!) state, int k_heads, float eps) -> Tensor",
            lambda qkvz, state, **_: _heads_out(state, 3, qkvz),  # (B, H d_v)
        ),
        CppFunction(
            "linear_step",
            "(Tensor q, Tensor k, Tensor v, Tensor(a!) kv, Tensor(b!) z, float eps) -> Tensor",
            lambda q, kv, **_: q.new_empty(kv.shape[0], kv.shape[1], kv.shape[3]),  # (B, H, E)
        ),
        CppFunction(
            "infini_step",
            "(Tensor q, Tensor k, Tensor v, Tensor(a!) ring_k, Tensor(b!) ring_v, Tensor(c!) mem, Tensor(d!) z, "
            "Tensor gate, Tensor key_valid, Tensor time, int segment, bool delta, float eps) -> Tensor",
            lambda q, **_: torch.empty_like(q),  # (B, H, D)
        ),
        CppFunction(
            "mamba2_token",
            "(Tensor x, Tensor in_weight, Tensor? in_scales, Tensor? in_bias, Tensor conv_w, Tensor? conv_b, "
            "Tensor(a!) window, Tensor dt_bias, Tensor A_log, Tensor D, Tensor norm_w, Tensor(b!) state, int groups, "
            "float eps, float dt_min, float dt_max, Tensor out_weight, Tensor? out_scales, Tensor? out_bias, "
            "Tensor? pre_weight, Tensor? pre_bias, float pre_eps, int pre_kind, bool past_cache) -> Tensor",
            lambda x, out_weight, **_: x.new_empty(*x.shape[:-1], out_weight.shape[0]),  # (1, 1, C_out)
        ),
        CppFunction(
            "linear_token",
            "(Tensor x, Tensor qkv_weight, Tensor? qkv_scales, Tensor? qkv_bias, Tensor(a!) kv, Tensor(b!) z, "
            "float eps, Tensor out_weight, Tensor? out_scales, Tensor? out_bias, Tensor? pre_weight, Tensor? pre_bias, "
            "float pre_eps, int pre_kind, bool past_cache) -> Tensor",
            lambda x, out_weight, **_: x.new_empty(*x.shape[:-1], out_weight.shape[0]),  # (1, 1, C_out)
        ),
        CppFunction(
            "infini_token",
            "(Tensor x, Tensor qkv_weight, Tensor? qkv_scales, Tensor? qkv_bias, Tensor(a!) ring_k, "
            "Tensor(b!) ring_v, Tensor(c!) mem, Tensor(d!) z, Tensor gate, Tensor key_valid, Tensor time, "
            "int segment, bool delta, float eps, Tensor out_weight, Tensor? out_scales, Tensor? out_bias, "
            "Tensor? pre_weight, Tensor? pre_bias, float pre_eps, int pre_kind, bool past_cache) -> Tensor",
            lambda x, out_weight, **_: x.new_empty(*x.shape[:-1], out_weight.shape[0]),  # (1, 1, C_out)
        ),
        CppFunction(
            "gdn_token",
            "(Tensor x, Tensor qkvz_weight, Tensor? qkvz_scales, Tensor? qkvz_bias, Tensor ba_weight, "
            "Tensor? ba_scales, Tensor? ba_bias, Tensor conv_w, Tensor(a!) window, Tensor dt_bias, Tensor A_log, "
            "Tensor norm_w, Tensor(b!) state, int k_heads, float eps, Tensor out_weight, Tensor? out_scales, "
            "Tensor? out_bias, Tensor? pre_weight, Tensor? pre_bias, float pre_eps, int pre_kind, bool past_cache) "
            "-> Tensor",
            lambda x, out_weight, **_: x.new_empty(*x.shape[:-1], out_weight.shape[0]),  # (1, 1, C_out)
        ),
    ],
)


KERNEL = Kernel("cpu-step", "cpu", EXTENSION.available, compiles=True)
WINDOW_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # what conv_window_row stores


def step_ready(
    mixer: KernelChoice,
    x: torch.Tensor,
    tensors: Iterable[torch.Tensor],
    token_valid: torch.Tensor | None,
    kernel: Kernel = KERNEL,
) -> bool:
    """Whether this one-token call of ``mixer`` runs its fused step ``kernel`` (module doc),
    resolving the mixer's kernel the first time it could. Plugins ask it through ``zoo.parts``."""
    for t in tensors:  # a loop, not all(...): a generator a call costs ~0.5 µs of a decode step's every layer
        if t.dtype != torch.float32 or not t.is_contiguous():
            return False
    if not mixer.uses(kernel, x.device, stateful=True):  # autograd, --impl elsewhere: reference
        return False
    if token_valid is None:
        return True
    return not torch.compiler.is_compiling() and bool(token_valid.all())  # a CPU tensor here: no device sync


def window_fits(window: torch.Tensor, x: torch.Tensor) -> bool:
    """Whether a fused step takes this convolution window for input ``x``: contiguous, float32 or
    ``x``'s dtype (a bfloat16 cache's window holds the projection's bfloat16 outputs, which the
    kernels store exactly; ``step_ready`` asks float32 of the recurrent states only). A float64
    window (a model moved to float64 with its cache) runs the reference: the kernels store float32,
    bfloat16 and float16 windows."""
    return window.is_contiguous() and window.dtype in (torch.float32, x.dtype) and window.dtype in WINDOW_DTYPES


def conv_step_ready(
    mixer: KernelChoice,
    x: torch.Tensor,
    state: Mapping[str, torch.Tensor],
    recurrent: str,
    token_valid: torch.Tensor | None,
    kernel: Kernel = KERNEL,
) -> bool:
    """``step_ready`` for a mixer whose state is a convolution window (``"conv"``, which
    ``window_fits``) and a float32 recurrent state (``state[recurrent]``)."""
    return window_fits(state["conv"], x) and step_ready(mixer, x, (state[recurrent],), token_valid, kernel)


def _taps(conv: torch.nn.Conv1d) -> tuple[torch.Tensor, torch.Tensor]:
    """A depthwise Conv1d's weight (C, K) and bias (C,) (empty when it has none), in their dtype."""
    return conv.weight[:, 0], torch.empty(0) if conv.bias is None else conv.bias


def mamba2_step(
    proj: torch.Tensor,
    conv: torch.nn.Conv1d,
    params: tuple[torch.Tensor, ...],
    state: dict[str, torch.Tensor],
    n_groups: int,
    eps: float,
    dt_limit: tuple[float, float],
) -> torch.Tensor:
    """Mamba2 between in_proj and out_proj: proj (B, d_inner + conv_dim + H) for one token ->
    the gated, group-normed y (B, d_inner); ``params`` are dt_bias, A_log, D and the norm's
    weight; ``state``'s conv window and ssm are updated in place."""
    low, high = dt_limit
    high = min(high, torch.finfo(torch.float32).max)  # fast maths assumes no infinities
    step = EXTENSION.op("mamba2_step")
    return step(proj, *_taps(conv), state["conv"], *params, state["ssm"], n_groups, eps, low, high)


def gdn_step(
    qkvz: torch.Tensor,
    ba: torch.Tensor,
    conv: torch.nn.Conv1d,
    params: tuple[torch.Tensor, ...],
    state: dict[str, torch.Tensor],
    n_k_heads: int,
    eps: float,
) -> torch.Tensor:
    """Gated DeltaNet between the input projections and out_proj: their outputs qkvz, ba for
    one token (B, 1, ...) in the checkpoint's grouped layout; ``params`` dt_bias, A_log and the
    norm's weight -> the gated, normed heads (B, H_v d_v); ``state``'s conv window and
    recurrent state updated in place."""
    weight, _ = _taps(conv)
    dt_bias, A_log, norm = params
    recurrent = state["recurrent"]
    return EXTENSION.op("gdn_step")(
        qkvz.squeeze(1), ba.squeeze(1), weight, state["conv"], dt_bias, A_log, norm, recurrent, n_k_heads, eps
    )


def linear_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Linear attention for one token: q, k, v (B, H, 1, D) before φ -> (B, H, 1, D); kv, z in place."""
    return EXTENSION.op("linear_step")(q.squeeze(2), k.squeeze(2), v.squeeze(2), kv, z, EPS).unsqueeze(2)


def linear_token(
    x: torch.Tensor,
    qkv_proj: StepTensors,
    kv: torch.Tensor,
    z: torch.Tensor,
    out_proj: StepTensors,
    norm: TokenNorm | None = None,
) -> torch.Tensor | None:
    """One token x (1, 1, C) through linear attention's fused q|k|v product, ``linear_step`` (kv
    (1, H, D, D) and z (1, H, D) updated in place) and o_proj in one C++ call, each projection as
    its layer's ``step_tensors`` give it (made by the one-row products' ``layer_row``: the
    module's bits) -> (1, 1, C_out); None where the call does not compute it (nothing written
    then). Eager calls only. With ``norm``: x + the attention of norm(x) (``mamba2_token``)."""
    if not cpu_token_ops.token_calls_run():
        return None
    pre = cpu_token_ops.pre_norm_args(norm)
    return EXTENSION.op("linear_token")(x, *qkv_proj, kv, z, EPS, *out_proj, *pre, row_product.PastCache.on)


def infini_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensors: dict[str, torch.Tensor],
    gate: torch.Tensor,
    key_valid: torch.Tensor | None,
    time: torch.Tensor,
    segment: int,
    delta: bool,
) -> torch.Tensor:
    """Infini-attention for one token at the cache slot ``time`` (1,) int64 (read by the kernel:
    no host sync, and a graph keeps it a tensor): q, k, v (B, H, 1, D) -> the gated mix of memory
    read and local softmax (B, H, 1, D); the ring, ``mem`` and ``z`` in place."""
    step = EXTENSION.op("infini_step")
    ring = _infini_ring(tensors, gate, key_valid, time)
    return step(q.squeeze(2), k.squeeze(2), v.squeeze(2), *ring, segment, delta, EPS).unsqueeze(2)


def infini_token(
    x: torch.Tensor,
    qkv_proj: StepTensors,
    tensors: dict[str, torch.Tensor],
    gate: torch.Tensor,
    key_valid: torch.Tensor | None,
    time: torch.Tensor,
    segment_and_delta: tuple[int, bool],
    out_proj: StepTensors,
    norm: TokenNorm | None = None,
) -> torch.Tensor | None:
    """One token x (1, 1, C) through Infini-attention's fused q|k|v product, ``infini_step``
    (its arguments as that takes them; the ring, ``mem`` and ``z`` in place) and o_proj in one
    C++ call, each projection as its layer's ``step_tensors`` give it (the one-row products'
    ``layer_row``: the module's bits) -> (1, 1, C_out); None where the call does not compute it
    (nothing written then). Eager calls only. With ``norm``: x + the attention of norm(x)."""
    if not cpu_token_ops.token_calls_run():
        return None
    ring = _infini_ring(tensors, gate, key_valid, time)
    pre = cpu_token_ops.pre_norm_args(norm)
    call = EXTENSION.op("infini_token")
    return call(x, *qkv_proj, *ring, *segment_and_delta, EPS, *out_proj, *pre, row_product.PastCache.on)


def _infini_ring(
    tensors: dict[str, torch.Tensor], gate: torch.Tensor, key_valid: torch.Tensor | None, time: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """Infini-attention's cache tensors, gate, valid slots (empty: none) and cache slot (1,) int64
    as its C++ step takes them."""
    valid = torch.empty(0, dtype=torch.bool) if key_valid is None else key_valid.contiguous()
    slot = time.to(torch.int64).contiguous()  # (1,)
    return (*(tensors[name] for name in ("k", "v", "mem", "z")), gate, valid, slot)


def mamba2_token(
    x: torch.Tensor,
    in_proj: StepTensors,
    conv: torch.nn.Conv1d,
    params: tuple[torch.Tensor, ...],
    state: dict[str, torch.Tensor],
    n_groups: int,
    eps: float,
    dt_limit: tuple[float, float],
    out_proj: StepTensors,
    norm: TokenNorm | None = None,
) -> torch.Tensor | None:
    """One token x (1, 1, C) through Mamba2's in_proj, ``mamba2_step`` (its arguments as that
    takes them) and out_proj in one C++ call, each projection as its layer's ``step_tensors``
    give it (made by the one-row products' ``layer_row``: the module's bits) -> (1, 1, C_out);
    None where the call does not compute it (nothing written then). Eager calls only. With
    ``norm``: x + the mixer of norm(x) (a pre-norm block's branch, ``cpu_token_ops.pre_norm_args``)."""
    if not cpu_token_ops.token_calls_run():
        return None
    low, high = dt_limit
    high = min(high, torch.finfo(torch.float32).max)  # as mamba2_step
    args = (conv.weight, conv.bias, state["conv"], *params, state["ssm"], n_groups, eps, low, high)
    pre = cpu_token_ops.pre_norm_args(norm)
    return EXTENSION.op("mamba2_token")(x, *in_proj, *args, *out_proj, *pre, row_product.PastCache.on)


def gdn_token(
    x: torch.Tensor,
    in_proj: tuple[StepTensors, StepTensors],
    conv: torch.nn.Conv1d,
    params: tuple[torch.Tensor, ...],
    state: dict[str, torch.Tensor],
    n_k_heads: int,
    eps: float,
    out_proj: StepTensors,
    norm: TokenNorm | None = None,
) -> torch.Tensor | None:
    """One token x (1, 1, C) through Gated DeltaNet's two input projections (qkvz, ba),
    ``gdn_step`` and out_proj in one C++ call, as ``mamba2_token`` (``norm`` too); None where
    the call does not compute it (nothing written then). Eager calls only."""
    if not cpu_token_ops.token_calls_run():
        return None
    qkvz, ba = in_proj
    args = (conv.weight, state["conv"], *params, state["recurrent"], n_k_heads, eps)
    pre = cpu_token_ops.pre_norm_args(norm)
    return EXTENSION.op("gdn_token")(x, *qkvz, *ba, *args, *out_proj, *pre, row_product.PastCache.on)

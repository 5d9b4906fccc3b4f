"""One-token decode steps of the recurrent mixers as fused C++ calls: the ``cpu-step`` kernel.

A decode step of Mamba2, Gated DeltaNet, linear attention or Infini-attention in PyTorch is a
few GEMVs (the projections) plus 50 to 140 more dispatched ops (views included): splits,
reshapes, the convolution window's concatenation and copy, exponentials, norms, gathers,
each a dispatch of microseconds over a few kilobytes. Here everything between
the input and the output projections is one call (``cpu_steps_source``): the state is read
and written once in place and nothing is materialised but the output. The projections stay
torch GEMVs (they move the weights: the part a roofline counts).

``step_ready`` is the gate each mixer asks first: the kernel is for inference (no autograd,
no ``torch.compile`` graph), float32 state tensors (``state_dtype: cache`` with a float32
cache included; a half-precision state runs the reference), a CPU tensor (on another
device the mixer resolves to its reference or that device's kernel) and a token that is real
in every row (a padding token in a decode step runs the reference). Mamba-1 has its own
fused scan (``cpu_scan``, prefill and step alike).
"""

from __future__ import annotations

import types
from collections.abc import Iterable

import torch

from zoo.components.cpu_extension import cpu_extension
from zoo.components.cpu_steps_source import SOURCE
from zoo.components.feature_state import EPS
from zoo.components.kernels import Kernel, KernelChoice

FUNCTIONS = ["mamba2_step", "gdn_step", "linear_step", "infini_step"]


def load() -> types.ModuleType | None:
    """The compiled steps (built once per machine), or None where they cannot be built."""
    return cpu_extension("zoo_cpu_steps", SOURCE, FUNCTIONS)


KERNEL = Kernel("cpu-step", "cpu", lambda: load() is not None)


def step_ready(
    mixer: KernelChoice,
    x: torch.Tensor,
    tensors: Iterable[torch.Tensor],
    token_valid: torch.Tensor | None,
    kernel: Kernel = KERNEL,
) -> bool:
    """Whether this one-token call of ``mixer`` runs its fused step ``kernel`` (module doc),
    resolving the mixer's kernel the first time it could. Plugins ask it through ``zoo.parts``."""
    if not all(t.dtype == torch.float32 and t.is_contiguous() for t in tensors):
        return False
    if not mixer.uses(kernel, x.device, stateful=True):  # compiled, autograd, --impl elsewhere: reference
        return False
    return token_valid is None or bool(token_valid.all())  # a CPU tensor here: no device sync


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t.float().contiguous()


def _taps(conv: torch.nn.Conv1d) -> tuple[torch.Tensor, torch.Tensor]:
    """A depthwise Conv1d's weight (C, K) and bias (C,) (empty when it has none), float32."""
    bias = torch.empty(0) if conv.bias is None else _f32(conv.bias)
    return _f32(conv.weight[:, 0]), bias


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
    module = load()
    assert module is not None, "cpu_steps used without a built kernel (step_ready first)"
    low, high = dt_limit
    high = min(high, torch.finfo(torch.float32).max)  # fast maths assumes no infinities
    params = tuple(_f32(p) for p in params)
    return module.mamba2_step(_f32(proj), *_taps(conv), state["conv"], *params, state["ssm"], n_groups, eps, low, high)


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
    module = load()
    assert module is not None, "cpu_steps used without a built kernel (step_ready first)"
    weight, _ = _taps(conv)
    dt_bias, A_log, norm = (_f32(p) for p in params)
    recurrent = state["recurrent"]
    return module.gdn_step(
        _f32(qkvz[:, 0]), _f32(ba[:, 0]), weight, state["conv"], dt_bias, A_log, norm, recurrent, n_k_heads, eps
    )


def linear_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Linear attention for one token: q, k, v (B, H, 1, D) before φ -> (B, H, 1, D); kv, z in place."""
    module = load()
    assert module is not None, "cpu_steps used without a built kernel (step_ready first)"
    return module.linear_step(*(_f32(t[:, :, 0]) for t in (q, k, v)), kv, z, EPS)[:, :, None]


def infini_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensors: dict[str, torch.Tensor],
    gate: torch.Tensor,
    key_valid: torch.Tensor | None,
    t0: int,
    segment: int,
    delta: bool,
) -> torch.Tensor:
    """Infini-attention for one token at cache slot ``t0``: q, k, v (B, H, 1, D) -> the gated mix
    of memory read and local softmax (B, H, 1, D); the ring, ``mem`` and ``z`` in place."""
    module = load()
    assert module is not None, "cpu_steps used without a built kernel (step_ready first)"
    valid = torch.empty(0, dtype=torch.bool) if key_valid is None else key_valid.contiguous()
    q, k, v = (_f32(t[:, :, 0]) for t in (q, k, v))
    ring = (tensors[name] for name in ("k", "v", "mem", "z"))
    return module.infini_step(q, k, v, *ring, _f32(gate), valid, t0, segment, delta, EPS)[:, :, None]

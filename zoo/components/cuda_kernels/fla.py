"""fla-org/flash-linear-attention (``flash-linear-attention``, >= 0.5) on CUDA: the gated
delta rule (Gated DeltaNet) and causal linear attention, Triton kernels.

The library's API (``fla/ops``; inputs ``[B, T, H, ...]``, ``head_first`` removed in 0.5):

- ``chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
  output_final_state=False, use_qk_l2norm_in_kernel=False, cu_seqlens=None)`` and
  ``fused_recurrent_gated_delta_rule`` with the same keywords (its positional order differs
  between releases: keywords only here): q, k (B, T, H, K), v (B, T, H, V), g (B, T, H) the
  log decay, beta (B, T, H) after the sigmoid, initial_state (B, H, K, V); per token
  S <- exp(g) S, S <- S + k (beta (v - Sᵀk))ᵀ, o = scale · Sᵀq; returns o (B, T, H, V) in q's
  dtype and the final state (B, H, K, V) float32. zoo normalises q and k itself (the same
  x / sqrt(Σx² + 1e-6) as the library's l2norm) and pre-scales q, so ``scale=1``;
- ``chunk_linear_attn(q, k, v, scale=None, initial_state=None, output_final_state=False,
  normalize=True)``: o_t = scale · q_t · (S_0 + Σ_{s≤t} k_s v_sᵀ). Its ``normalize`` divides by
  scale · q_t·Σ k_s + 1e-10, not zoo's φ(q)·z + 1e-6, so it runs with ``normalize=False`` and
  the denominator (a cumulative sum) is computed here, exactly zoo's maths. Feature maps are
  applied by the caller (φ = elu + 1).

Gated DeltaNet's kernel also needs causal-conv1d (its convolution), as transformers' fast path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from zoo.components.cuda_kernels import Library
from zoo.components.feature_state import EPS


@dataclass(frozen=True)
class Ops:
    chunk_gated_delta_rule: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    fused_recurrent_gated_delta_rule: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    chunk_linear_attn: Callable[..., tuple[torch.Tensor, torch.Tensor]]


def _import() -> Ops:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    from fla.ops.linear_attn import chunk_linear_attn

    return Ops(chunk_gated_delta_rule, fused_recurrent_gated_delta_rule, chunk_linear_attn)


LIBRARY = Library("flash-linear-attention", _import)


def load() -> bool:
    """Whether fla imports (see ``Library``)."""
    return LIBRARY.load() is not None


def gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor | None,
) -> torch.Tensor:
    """Outputs (B, T, H, d_v) in q's dtype: q, k (B, T, H, d_k) normalised, q scaled; v
    (B, T, H, d_v); g, beta (B, T, H); ``state`` (B, H, d_k, d_v) read and overwritten in
    place (None: from zeros, not kept). One token with a state is the fused recurrent step."""
    ops = LIBRARY.loaded()
    step = state is not None and q.shape[1] == 1
    rule = ops.fused_recurrent_gated_delta_rule if step else ops.chunk_gated_delta_rule
    out, final = rule(
        q, k, v, g=g, beta=beta, scale=1.0, initial_state=state, output_final_state=state is not None
    )  # (B, T, H, d_v), (B, H, d_k, d_v)
    if state is not None:
        state.copy_(final)
    return out


def linear_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv: torch.Tensor, k_sum: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """φ(q)·S_t / (φ(q)·z_t + eps) for φ(q), φ(k), v (B, H, T, D) float32 against the state
    entering the call, kv (B, H, D, D) and k_sum (B, H, D); the kernel runs in ``dtype``.
    Returns y (B, H, T, D) float32 and the state after the call."""
    qt, kt, vt = (t.transpose(1, 2).to(dtype) for t in (q, k, v))  # (B, T, H, D): fla's layout
    numerator, kv = LIBRARY.loaded().chunk_linear_attn(
        qt, kt, vt, scale=1.0, initial_state=kv, output_final_state=True, normalize=False
    )  # (B, T, H, D), (B, H, D, D)
    z = k_sum[:, None] + k.transpose(1, 2).cumsum(dim=1)  # (B, T, H, D): Σ_{s≤t} φ(k_s) with the entering sum
    denominator = (q.transpose(1, 2) * z).sum(-1, keepdim=True)  # (B, T, H, 1)
    y = numerator.float() / (denominator + EPS)  # (B, T, H, D)
    return y.transpose(1, 2), kv.float(), z[:, -1]

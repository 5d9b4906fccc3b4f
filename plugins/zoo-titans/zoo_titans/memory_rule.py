"""The maths of Titans' neural long-term memory over explicit tensors (no modules, no autograd).

The memory is an MLP per head, weights ``W_l`` (B, H, out_l, in_l), l = 1..L, SiLU between
layers. Each token writes by one gradient step on the associative loss
``loss_t = ||M(k_t) - v_t||²`` with momentum and forgetting (Behrouz et al., 2025, eqs. 13-14):

    S_t = eta_t S_{t-1} - theta_t grad loss_t(M')        (surprise, momentum eta)
    M_t = (1 - alpha_t) M_{t-1} + S_t                     (forgetting alpha)
    y_t = M_t(q_t)                                        (retrieval, no update)

Gradients are the closed-form backward pass of the MLP (rank one per token and layer:
``delta_l a_{l-1}ᵀ``), so the update runs under ``torch.inference_mode`` and costs no graph.
``M'`` is the weights at the start of the token's chunk (section 3.2: mini-batch gradient
descent inside a chunk, so every gradient of a chunk is one batched product); with chunks of
one token it is ``M_{t-1}`` and the rule is the paper's per-token recurrence. The momentum
and the forgetting are linear recurrences, so inside a chunk each ``M_t`` is a weighted sum
of the chunk-start weights, momentum and the rank-one gradients: retrieval through every
``M_t`` is then attention-like products over the chunk (C x C), never a per-token copy of
the weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

Weights = list[torch.Tensor]  # one (B, H, out_l, in_l) per layer


@dataclass
class Gates:
    """Per-token, per-head scalars of one segment, each (B, H, n); float32."""

    log_eta: torch.Tensor  # log of the momentum decay eta_t in (0, 1]
    theta: torch.Tensor  # the step size theta_t >= 0
    log_keep: torch.Tensor  # log(1 - alpha_t), alpha_t the forgetting


def silu_grad(h: torch.Tensor) -> torch.Tensor:
    """d SiLU(h) / dh = s (1 + h (1 - s)), s = sigmoid(h)."""
    s = torch.sigmoid(h)
    return s * (1 + h * (1 - s))


def mlp(weights: Weights, x: torch.Tensor) -> torch.Tensor:
    """The memory applied to x (B, H, n, in) with the same weights for every token."""
    for i, w in enumerate(weights):
        x = x @ w.transpose(-1, -2)  # (B, H, n, out)
        if i < len(weights) - 1:
            x = F.silu(x)
    return x


def gradients(weights: Weights, k: torch.Tensor, v: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per-token gradients of ||M(k) - v||² as outer products ``deltas[l]ᵀ inputs[l]``.

    k, v: (B, H, n, D). Returns ``inputs[l]`` (B, H, n, in_l), the layer's input activation,
    and ``deltas[l]`` (B, H, n, out_l), the loss's gradient at the layer's pre-activation.
    """
    inputs, pre = [], []
    a = k
    for i, w in enumerate(weights):
        inputs.append(a)
        h = a @ w.transpose(-1, -2)  # (B, H, n, out)
        pre.append(h)
        a = F.silu(h) if i < len(weights) - 1 else h
    delta = 2 * (a - v)  # (B, H, n, D): d loss / d output
    deltas = [delta]
    for i in range(len(weights) - 1, 0, -1):
        delta = (delta @ weights[i]) * silu_grad(pre[i - 1])  # (B, H, n, in_i)
        deltas.append(delta)
    return inputs, deltas[::-1]


def segment_decays(log: torch.Tensor) -> torch.Tensor:
    """L[t, j] = prod_{j < m <= t} exp(log_m) over the segment's start (index 0) and its
    n tokens (1..n): (..., n+1, n+1), 0 above the diagonal. Sums of logs, never ratios of
    products, so long segments of strong decay do not underflow into 0/0."""
    n = log.shape[-1]
    ext = F.pad(log, (1, 0))  # (..., n+1)
    rep = ext[..., None].expand(*ext.shape, n + 1)  # (..., n+1, n+1): [t, j] = ext[t]
    strict = torch.tril(torch.ones(n + 1, n + 1, dtype=torch.bool, device=log.device), diagonal=-1)
    sums = rep.masked_fill(~strict, 0).cumsum(dim=-2)  # [t, j] = sum_{j < m <= t} ext[m]
    lower = torch.tril(torch.ones(n + 1, n + 1, dtype=torch.bool, device=log.device))
    return sums.masked_fill(~lower, float("-inf")).exp()


def segment(
    start: Weights, momentum: Weights, anchor: Weights, k: torch.Tensor, v: torch.Tensor, q: torch.Tensor, gates: Gates
) -> tuple[torch.Tensor, Weights, Weights]:
    """Write n tokens into the memory and read each one's query after its own write.

    ``start``/``momentum``: M and S before the segment; ``anchor``: the weights the
    gradients are taken at (the chunk's first weights). k, v, q: (B, H, n, D) float32.
    Returns y (B, H, n, D), and M, S after the segment's last token.
    """
    if k.shape[2] == 1:
        return one_token(start, momentum, anchor, k, v, q, gates)
    inputs, deltas = gradients(anchor, k, v)
    decay_s = segment_decays(gates.log_eta)  # (B, H, n+1, n+1)
    decay_m = segment_decays(gates.log_keep)  # (B, H, n+1, n+1)
    keep_m = decay_m[..., 1:, 0]  # (B, H, n): coefficient of M_start in M_t
    keep_s = decay_m[..., 1:, 1:] @ decay_s[..., 1:, :1]  # (B, H, n, 1): of S_start in M_t
    write = (decay_m[..., 1:, 1:] @ decay_s[..., 1:, 1:]) * gates.theta[..., None, :]  # (B, H, n, n): of -grad_i in M_t
    z = q
    for i, (m, s) in enumerate(zip(start, momentum)):
        scores = (z @ inputs[i].transpose(-1, -2)) * write  # (B, H, n, n)
        h = (z @ m.transpose(-1, -2)) * keep_m[..., None] + (z @ s.transpose(-1, -2)) * keep_s - scores @ deltas[i]
        z = F.silu(h) if i < len(start) - 1 else h  # (B, H, n, out)
    s_last = decay_s[..., -1, 1:] * gates.theta  # (B, H, n): of -grad_i in S_n
    new_m, new_s = [], []
    for m, s, a, d in zip(start, momentum, inputs, deltas):
        new_s.append(decay_s[..., -1, 0, None, None] * s - torch.einsum("bhn,bhno,bhni->bhoi", s_last, d, a))
        new_m.append(
            keep_m[..., -1, None, None] * m
            + keep_s[..., -1, :, None] * s
            - torch.einsum("bhn,bhno,bhni->bhoi", write[..., -1, :], d, a)
        )
    return z, new_m, new_s


def one_token(
    start: Weights, momentum: Weights, anchor: Weights, k: torch.Tensor, v: torch.Tensor, q: torch.Tensor, gates: Gates
) -> tuple[torch.Tensor, Weights, Weights]:
    """``segment`` for n = 1 (every decode step): the recurrence itself, S = eta S - theta g,
    M = (1 - alpha) M + S, y = M(q), without the segment's decay matrices (a third of the ops)."""
    inputs, deltas = gradients(anchor, k, v)
    eta, keep = gates.log_eta.exp()[..., None], gates.log_keep.exp()[..., None]  # (B, H, 1, 1)
    theta = gates.theta[..., None]  # (B, H, 1, 1)
    new_s = [
        eta * s - theta * (d.transpose(-1, -2) @ a) for s, a, d in zip(momentum, inputs, deltas)
    ]  # (B, H, out, in)
    new_m = [keep * m + s for m, s in zip(start, new_s)]
    return mlp(new_m, q), new_m, new_s

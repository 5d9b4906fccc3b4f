"""The gated delta rule (Gated DeltaNet, Qwen3-Next): a chunked prefill and a one-token step.

Per value head the state S (d_k, d_v) evolves, for each token with key k, value v, query q,
decay g <= 0 (log space) and write strength beta in (0, 1), as

    S <- exp(g) S;   S <- S + k (beta (v - k^T S))^T;   o = S^T q

(the delta rule writes only what the state does not already predict for k). A loop per
token is slow in prefill, so a chunk of C tokens is done in a few matrix products (the
UT transform of the DeltaNet paper, arXiv 2412.06464): inside a chunk the corrections
depend on each other through a unit lower-triangular system, solved once per chunk; chunks
then follow each other in a loop over T / C, not over T. All maths is float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim, as the FLA kernels (and transformers) do."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs (B, H, T, d_v) and the final state (B, H, d_k, d_v) after ``T`` tokens.

    q, k: (B, H, T, d_k), already normalised and q scaled; v: (B, H, T, d_v); g, beta:
    (B, H, T); state: (B, H, d_k, d_v), the state before the first token. float32 in.
    """
    B, H, T, d_k = k.shape
    d_v = v.shape[-1]
    chunk_size = min(chunk_size, T)  # a short sequence is one chunk, not a padded one
    pad = (-T) % chunk_size
    if pad:  # padded tokens: k = v = 0, beta = 0, g = 0 leave the state as it was
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        g, beta = (F.pad(t, (0, pad)) for t in (g, beta))
    n = (T + pad) // chunk_size
    q, k, v = (t.reshape(B, H, n, chunk_size, t.shape[-1]) for t in (q, k, v))  # (B, H, N, C, d)
    g, beta = (t.reshape(B, H, n, chunk_size) for t in (g, beta))  # (B, H, N, C)

    k_beta = k * beta[..., None]  # (B, H, N, C, d_k)
    v_beta = v * beta[..., None]  # (B, H, N, C, d_v)
    g_cum = g.cumsum(dim=-1)  # (B, H, N, C): log decay from the chunk start to each token
    upper = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).triu(1)
    decay = (g_cum[..., :, None] - g_cum[..., None, :]).masked_fill(upper, float("-inf")).exp()  # (B, H, N, C, C)

    # Unit lower-triangular system (I + strict_lower(K_beta K^T * decay)): its solutions are
    # the chunk's corrected values u and the decayed keys w that read the incoming state.
    # One solve for both right-hand sides: the system's (C, C) gradient is formed once in backward.
    system = (k_beta @ k.transpose(-1, -2)) * decay  # (B, H, N, C, C)
    growth = g_cum.exp()[..., None]  # (B, H, N, C, 1): decay from the chunk start
    rhs = torch.cat([v_beta, k_beta * growth], dim=-1)  # (B, H, N, C, d_v + d_k)
    u, w = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True).split([d_v, d_k], dim=-1)
    intra = (q @ k.transpose(-1, -2)) * decay  # (B, H, N, C, C), causal within the chunk
    q_decayed = q * growth  # (B, H, N, C, d_k)
    k_decayed = k * (g_cum[..., -1:] - g_cum).exp()[..., None]  # (B, H, N, C, d_k)
    chunk_decay = g_cum[..., -1].exp()[..., None, None]  # (B, H, N, 1, 1)

    out = torch.empty(B, H, n, chunk_size, d_v, dtype=v.dtype, device=v.device)
    for i in range(n):  # one step per chunk
        v_new = u[:, :, i] - w[:, :, i] @ state  # (B, H, C, d_v)
        out[:, :, i] = q_decayed[:, :, i] @ state + intra[:, :, i] @ v_new
        state = state * chunk_decay[:, :, i] + k_decayed[:, :, i].transpose(-1, -2) @ v_new  # (B, H, d_k, d_v)
    return out.reshape(B, H, n * chunk_size, d_v)[:, :, :T], state


def gated_delta_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token: output (B, H, d_v) and the new state (B, H, d_k, d_v).

    q, k: (B, H, d_k); v: (B, H, d_v); g, beta: (B, H); state: (B, H, d_k, d_v). float32.
    """
    state = state * g.exp()[..., None, None]  # (B, H, d_k, d_v)
    predicted = (k[..., None, :] @ state).squeeze(-2)  # (B, H, d_v) = k^T S
    delta = (v - predicted) * beta[..., None]  # (B, H, d_v)
    state = state + k[..., :, None] * delta[..., None, :]  # (B, H, d_k, d_v)
    out = (q[..., None, :] @ state).squeeze(-2)  # (B, H, d_v)
    return out, state

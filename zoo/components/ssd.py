"""Mamba2's state-space duality (SSD) scan: a chunked prefill and a one-token step.

Per head h the state S (P, N) evolves, for each token with input x (P), step dt > 0, scalar
decay A_h < 0 and the token's B, C (N, shared by the heads of a group), as

    S <- exp(dt A_h) S + dt x B^T;   y = S C + D_h x.

Prefill splits the sequence into chunks of L tokens (arXiv 2405.21060, section 6): inside a
chunk the output is a masked, decayed "attention" C_l . B_s over the chunk's inputs (matrix
products), each chunk's own contribution to the state is one more product, and the state is
carried from chunk to chunk in a loop over T / L, never over T. All maths is float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def chunk_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    state: torch.Tensor,
    chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs y (B, T, H, P) without the D skip, and the state (B, H, P, N) after T tokens.

    x: (B, T, H, P); dt: (B, T, H) after softplus; A: (H,) negative; B, C: (B, T, H, N),
    already expanded from groups to heads; state: (B, H, P, N) before the first token.
    """
    batch, T, H, P = x.shape
    chunk_size = min(chunk_size, T)  # a short sequence is one chunk: padding it to 256 multiplied training cost 6x
    pad = (-T) % chunk_size
    if pad:  # padded tokens have dt = 0: no decay and no input, the state passes unchanged
        x, B, C = (F.pad(t, (0, 0, 0, 0, 0, pad)) for t in (x, B, C))
        dt = F.pad(dt, (0, 0, 0, pad))
    n = (T + pad) // chunk_size
    x_dt = (x * dt[..., None]).reshape(batch, n, chunk_size, H, P)  # (b, c, l, h, p)
    B, C = (t.reshape(batch, n, chunk_size, H, -1) for t in (B, C))  # (b, c, l, h, n)
    a_cum = (dt * A).reshape(batch, n, chunk_size, H).cumsum(dim=2)  # (b, c, l, h): log decay from chunk start

    upper = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=x.device).triu(1)
    seg = a_cum.permute(0, 1, 3, 2)  # (b, c, h, l)
    decay = (seg[..., :, None] - seg[..., None, :]).masked_fill(upper, float("-inf")).exp()  # (b, c, h, l, s)
    scores = torch.einsum("bclhn,bcshn->bchls", C, B) * decay  # (b, c, h, l, s)
    y = torch.einsum("bchls,bcshp->bclhp", scores, x_dt)  # (b, c, l, h, p): within each chunk

    to_end = (a_cum[:, :, -1:] - a_cum).exp()  # (b, c, l, h): decay from each token to its chunk's end
    chunk_states = torch.einsum("bclhn,bclh,bclhp->bchpn", B, to_end, x_dt)  # (b, c, h, p, n)
    chunk_decay = a_cum[:, :, -1].exp()[..., None, None]  # (b, c, h, 1, 1)
    starts = []
    for i in range(n):  # one step per chunk: the state entering chunk i
        starts.append(state)
        state = state * chunk_decay[:, i] + chunk_states[:, i]  # (b, h, p, n)
    start = torch.stack(starts, dim=1)  # (b, c, h, p, n)
    y = y + torch.einsum("bclhn,bchpn,bclh->bclhp", C, start, a_cum.exp())  # what the carried state adds
    return y.reshape(batch, n * chunk_size, H, P)[:, :T], state


def ssd_step(
    x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token: y (B, H, P) without the D skip, and the new state (B, H, P, N).

    x: (B, H, P); dt: (B, H); A: (H,); B, C: (B, H, N); state: (B, H, P, N).
    """
    decay = (dt * A).exp()[..., None, None]  # (B, H, 1, 1)
    state = state * decay + (dt[..., None] * x)[..., :, None] * B[..., None, :]  # (B, H, P, N)
    y = (state @ C[..., :, None]).squeeze(-1)  # (B, H, P)
    return y, state

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

    x: (B, T, H, P); dt: (B, T, H) after softplus; A: (H,) negative; B, C: (B, T, G, N), G
    groups of H / G consecutive heads each (G = H: one per head); state: (B, H, P, N) before
    the first token.

    The products run per group, not per head: C·Bᵀ is one (L, L) matrix per chunk and group,
    shared by the group's heads (only the decay differs per head), and the chunk states and
    the carried state's read take the group's heads side by side as one (L, R·P) operand. So
    every matrix product is one large product per chunk and group, and no tensor is repeated
    across heads (Mamba2-130m has one group for 24 heads).
    """
    batch, T, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    R = H // G  # heads per group
    chunk_size = min(chunk_size, T)  # a short sequence is one chunk: padding it to 256 multiplied training cost 6x
    pad = (-T) % chunk_size
    if pad:  # padded tokens have dt = 0: no decay and no input, the state passes unchanged
        x, B, C = (F.pad(t, (0, 0, 0, 0, 0, pad)) for t in (x, B, C))
        dt = F.pad(dt, (0, 0, 0, pad))
    n, L = (T + pad) // chunk_size, chunk_size
    a_cum = (dt * A).reshape(batch, n, L, H).cumsum(dim=2)  # (b, c, l, h): log decay from chunk start
    x_dt = (x * dt[..., None]).reshape(batch, n, L, G, R * P).transpose(2, 3)  # (b, c, g, l, r·p)
    B, C = (t.reshape(batch, n, L, G, N).transpose(2, 3) for t in (B, C))  # (b, c, g, l, n)

    seg = a_cum.permute(0, 1, 3, 2)  # (b, c, h, l)
    upper = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)
    decay = (seg[..., :, None] - seg[..., None, :]).masked_fill(upper, float("-inf")).exp()  # (b, c, h, l, s)
    scores = decay.view(batch, n, G, R, L, L) * (C @ B.transpose(-1, -2))[:, :, :, None]  # (b, c, g, r, l, s)
    x_heads = x_dt.unflatten(-1, (R, P)).transpose(-3, -2)  # (b, c, g, r, s, p)
    y = scores @ x_heads  # (b, c, g, r, l, p): within each chunk

    to_end = (a_cum[:, :, -1:] - a_cum).exp()  # (b, c, l, h): decay from each token to its chunk's end
    weighted = x_dt * to_end.view(batch, n, L, G, R).transpose(2, 3).repeat_interleave(P, dim=-1)  # (b, c, g, l, r·p)
    chunk_states = B.transpose(-1, -2) @ weighted  # (b, c, g, n, r·p)
    chunk_decay = a_cum[:, :, -1].exp().view(batch, n, G, 1, R, 1)  # (b, c, g, 1, r, 1)
    state = state.reshape(batch, G, R, P, N).permute(0, 1, 4, 2, 3)  # (b, g, n, r, p)
    starts = []
    for i in range(n):  # one step per chunk: the state entering chunk i
        starts.append(state)
        state = state * chunk_decay[:, i] + chunk_states[:, i].view(batch, G, N, R, P)  # (b, g, n, r, p)
    start = torch.stack(starts, dim=1).flatten(-2)  # (b, c, g, n, r·p)
    carried = (C @ start).unflatten(-1, (R, P)).transpose(-3, -2)  # (b, c, g, r, l, p): what the state adds
    y = y + carried * seg.exp().view(batch, n, G, R, L, 1)
    y = y.permute(0, 1, 4, 2, 3, 5).reshape(batch, n * L, H, P)[:, :T]  # (B, T, H, P)
    return y, state.permute(0, 1, 3, 4, 2).reshape(batch, H, P, N)


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

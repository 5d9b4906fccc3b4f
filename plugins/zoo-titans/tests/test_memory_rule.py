"""The memory rule against a per-token loop written from the paper's equations (13-15 of
Behrouz et al., 2025), with the loss's gradient from autograd, not from the closed form."""

from __future__ import annotations

import itertools

import pytest
import titans_helpers  # noqa: F401 (stages zoo-titans)
import torch
import torch.nn.functional as F
from zoo_titans.memory_rule import Gates, segment

B, H, D, HIDDEN = 2, 3, 4, 6


def assoc_loss(weights, k, v):
    """||M(k) - v||², M the MLP of ``weights`` with SiLU between layers."""
    out = k
    for i, w in enumerate(weights):
        out = w @ out
        out = F.silu(out) if i < len(weights) - 1 else out
    return ((out - v) ** 2).sum()


def paper_loop(weights, k, v, q, eta, theta, alpha, chunk=1, momentum=None):
    """For t: S_t = eta_t S_{t-1} - theta_t grad ||M'(k_t) - v_t||², M_t = (1 - alpha_t) M_{t-1} + S_t,
    y_t = M_t(q_t); M' = M at the start of t's chunk (chunk 1: M_{t-1}). Per (batch, head); S_0 is
    ``momentum`` (zeros when None)."""
    batch, heads, T = k.shape[:3]
    ys = torch.zeros_like(q)
    last_m, last_s = [torch.zeros_like(w) for w in weights], [torch.zeros_like(w) for w in weights]
    for b in range(batch):
        for h in range(heads):
            m = [w[b, h].clone() for w in weights]
            s = [torch.zeros_like(w) if momentum is None else momentum[i][b, h].clone() for i, w in enumerate(m)]
            for t in range(T):
                if t % chunk == 0:
                    anchor = [w.clone().requires_grad_(True) for w in m]
                with torch.enable_grad():
                    loss = assoc_loss(anchor, k[b, h, t], v[b, h, t])
                grads = torch.autograd.grad(loss, anchor)
                s = [eta[b, h, t] * si - theta[b, h, t] * g for si, g in zip(s, grads)]
                m = [(1 - alpha[b, h, t]) * mi + si for mi, si in zip(m, s)]
                y = q[b, h, t]
                for i, w in enumerate(m):
                    y = w @ y
                    y = F.silu(y) if i < len(m) - 1 else y
                ys[b, h, t] = y.detach()
            for i in range(len(m)):
                last_m[i][b, h], last_s[i][b, h] = m[i].detach(), s[i].detach()
    return ys, last_m, last_s


def chunked(weights, k, v, q, eta, theta, alpha, chunk):
    m, s = [w.clone() for w in weights], [torch.zeros_like(w) for w in weights]
    ys = []
    for start in range(0, k.shape[2], chunk):
        sl = slice(start, start + chunk)
        gates = Gates(eta[..., sl].log(), theta[..., sl], (1 - alpha[..., sl]).log())
        y, m, s = segment(m, s, m, k[:, :, sl], v[:, :, sl], q[:, :, sl], gates)
        ys.append(y)
    return torch.cat(ys, dim=2), m, s


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("chunk", [1, 3, 8])
def test_the_chunked_form_is_the_paper_loop(depth, chunk):
    torch.manual_seed(depth)
    T = 8
    dims = [D] + [HIDDEN] * (depth - 1) + [D]
    weights = [torch.randn(B, H, o, i, dtype=torch.float64) / i**0.5 for i, o in itertools.pairwise(dims)]
    k, v, q = (F.normalize(torch.randn(B, H, T, D, dtype=torch.float64), dim=-1) for _ in range(3))
    eta, theta, alpha = (torch.rand(B, H, T, dtype=torch.float64) * 0.9 + 0.05 for _ in range(3))
    ref = paper_loop(weights, k, v, q, eta, theta, alpha, chunk=chunk)
    got = chunked(weights, k, v, q, eta, theta, alpha, chunk)
    torch.testing.assert_close(got[0], ref[0])
    for a, b in zip(got[1] + got[2], ref[1] + ref[2]):
        torch.testing.assert_close(a, b)

"""state-spaces/mamba (``mamba-ssm``) on CUDA: Mamba-1's selective scan and Mamba2's SSD scan,
each a prefill and a one-token state update.

The library's API (2.2 to 2.3):

- ``selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None,
  delta_softplus=False, return_last_state=False)`` (``ops/selective_scan_interface.py``, the
  compiled ``selective_scan_cuda``): u, delta, z (B, d, T) of one dtype, A (d, N) float32,
  B, C (B, N, T) in u's dtype, D (d,) float32; out = (C_t·h_t + D u_t)·silu(z_t) (B, d, T) in
  u's dtype, last_state (B, d, N) float32. The scan always starts from a zero state;
- ``selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
  dt_softplus=False)`` (``ops/triton/selective_state_update.py``): Mamba-1 shapes state
  (B, d, N), x, dt, z (B, d), A (d, N), B, C (B, N), D (d,); Mamba2 shapes state (B, H, P, N),
  x, dt (B, H, P), A (H, P, N), B, C (B, G, N), D (H, P), dt_bias (H, P). The state is updated
  in place in its own dtype; out in x's dtype. Per head dt and A may be broadcast along P with
  stride 0 ("tie_hdim"), in which case the kernel also reads ``dt_bias``'s stride: it must be
  given;
- ``mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
  initial_states=None, ..., dt_softplus=False, return_final_states=False)``
  (``ops/triton/ssd_combined.py``): x (B, T, H, P), dt (B, T, H), A (H,), B, C (B, T, G, N)
  (head h reads group h // (H / G)), D (H,), initial_states (B, H, P, N); returns out
  (B, T, H, P) in x's dtype (with the D skip) and, if asked, the final state (B, H, P, N).

zoo hands both scans dt after its softplus, clamp and padding mask (a zero step leaves the
state as it was), so ``delta_bias``/``dt_bias`` are unused and softplus is off.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from zoo.components.cuda_kernels import Library

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ops:
    selective_scan_fn: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None  # None: selective_scan_cuda not built
    selective_state_update: Callable[..., torch.Tensor]
    mamba_chunk_scan_combined: Callable[..., torch.Tensor | tuple[torch.Tensor, torch.Tensor]]


def _import() -> Ops:
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    try:  # mamba-ssm 2.3 installs without its CUDA scan unless built (MAMBA_KEEP_CUDA_BUILD=TRUE)
        import selective_scan_cuda  # noqa: F401
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    except Exception as exc:
        log.warning("zoo: mamba-ssm's selective_scan_cuda is not usable (%s); Mamba-1 runs PyTorch", exc)
        selective_scan_fn = None
    return Ops(selective_scan_fn, selective_state_update, mamba_chunk_scan_combined)


LIBRARY = Library("mamba-ssm", _import)


def load_mamba1() -> bool:
    ops = LIBRARY.load()
    return ops is not None and ops.selective_scan_fn is not None


def load_mamba2() -> bool:
    return LIBRARY.load() is not None


def mamba1_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    z: torch.Tensor,
    state: torch.Tensor | None,
    fresh: bool,
) -> torch.Tensor:
    """(C_t·h_t + D x_t)·silu(z_t) (B, T, d) in x's dtype: x, z (B, T, d), dt (B, T, d) after
    softplus, A (d, N), B, C (B, T, N); ``state`` (B, d, N) is the state before the first
    token (zeros if ``fresh``) and is overwritten with the state after the last."""
    ops = LIBRARY.loaded()
    if state is not None and x.shape[1] == 1:
        y = ops.selective_state_update(state, x[:, 0], dt[:, 0], A, B[:, 0], C[:, 0], D=D.float(), z=z[:, 0])
        return y[:, None]  # (B, 1, d)
    assert ops.selective_scan_fn is not None, "mamba1_scan without selective_scan_cuda (check load_mamba1)"
    u, delta, gate = (t.transpose(1, 2) for t in (x, dt.to(x.dtype), z))  # (B, d, T): the kernel's layout
    y, last = ops.selective_scan_fn(
        u, delta, A.float(), B.transpose(1, 2), C.transpose(1, 2), D.float(), gate, return_last_state=True
    )  # (B, d, T), (B, d, N)
    y = y.transpose(1, 2)  # (B, T, d)
    if state is None:
        return y
    if not fresh:  # the kernel starts from zero: add what the entering state h0 contributes (linear in h0)
        decay = torch.exp(dt.float().cumsum(1)[..., None] * A.float())  # (B, T, d, N): h0's decay to each t
        h0 = state.float()
        carried = torch.einsum("btdn,bdn,btn->btd", decay, h0, C.float())  # (B, T, d)
        y = (y.float() + carried * F.silu(z.float())).to(x.dtype)
        last = last + decay[:, -1] * h0
    state.copy_(last)
    return y


def mamba2_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    state: torch.Tensor | None,
    chunk_size: int,
) -> torch.Tensor:
    """y = S C + D x per head (B, T, H, P) in x's dtype: x (B, T, H, P), dt (B, T, H) after
    softplus and clamp, A (H,), B, C (B, T, G, N) per group, D (H,); ``state`` (B, H, P, N),
    read and overwritten in place (None: from zeros, not kept)."""
    ops = LIBRARY.loaded()
    batch, T, H, P = x.shape
    if state is not None and T == 1:
        N = B.shape[-1]
        y = ops.selective_state_update(
            state,
            x[:, 0],  # (B, H, P)
            dt[:, 0, :, None].expand(batch, H, P),  # per head, stride 0 along P
            A.float()[:, None, None].expand(H, P, N),
            B[:, 0],  # (B, G, N)
            C[:, 0],
            D=D.float()[:, None].expand(H, P),
            dt_bias=dt.new_zeros(H)[:, None].expand(H, P),  # read by the tied-dt path; adds nothing
        )  # (B, H, P)
        return y[:, None]
    if state is None:
        return ops.mamba_chunk_scan_combined(x, dt, A.float(), B, C, chunk_size, D=D.float())
    y, final = ops.mamba_chunk_scan_combined(
        x, dt, A.float(), B, C, chunk_size, D=D.float(), initial_states=state, return_final_states=True
    )  # (B, T, H, P), (B, H, P, N)
    state.copy_(final)
    return y

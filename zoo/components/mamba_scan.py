"""Mamba (v1) maths as pure functions: the selective scan (its short convolution is
``causal_conv``'s, shared with Mamba2 and Gated DeltaNet).

The recurrence per channel d and state dimension n is

    h_t = exp(dt_t · A) ⊙ h_{t-1} + dt_t · B_t · x_t        y_t = C_t · h_t + D ⊙ x_t

with A (d_inner, N) negative, dt (after softplus) and B, C input dependent. A prefill must
not be a Python loop per token: ``selective_scan`` cuts the sequence into chunks and, inside
a chunk, runs a Hillis-Steele inclusive scan over time (log2(chunk) steps of whole-chunk
tensor products) on the pairs (decay, input) with (a1, b1)∘(a2, b2) = (a1·a2, a2·b1 + b2).
Only products of decays ≤ 1 appear, so, unlike the cumulative-sum-of-logs form (which
divides by exp(Σ dt·A) and overflows once Σ dt·|A| passes ~88 in float32), nothing can
overflow. The state entering a chunk is carried by the chunk's prefix products. One Python
iteration per chunk keeps each chunk's (B, L, d_inner, N) tensors in cache.

``selective_step`` is the one-token update used by decode steps; it writes the state in
place, so a compiled step mutates the cache and holds no Python state.
"""

from __future__ import annotations

import torch

CHUNK_ELEMENTS = 1 << 17  # elements of one (B, L, d, N) chunk tensor on a CPU: 512 KiB in float32
MAX_CHUNK = 64
GPU_CHUNK_ELEMENTS = 1 << 24  # on a GPU: 64 MiB in float32, six such tensors live at once
MAX_GPU_CHUNK = 256


def chunk_length(batch: int, d_inner: int, d_state: int, device: torch.device | None = None) -> int:
    """Tokens per chunk: a power of two, at least 4, at most what the device's limits allow.

    On a CPU the chunk's (B, L, d, N) tensors stay about 512 KiB, so that its four of them
    stay in cache through its log2(L) steps. Longer chunks add steps and fall out of cache:
    with mamba-130m's shapes (batch 1, one thread, 512 tokens, CPU time on this 2-core Xeon)
    chunks of 4 took 38 ms per layer, of 8 52 ms, of 16 about 2.5 times as long as 4; a
    per-token loop took 27-38 ms.

    On a GPU a chunk's tensors live in device memory whatever their size, and what costs is
    the host: each chunk is about 4 + 4·log2(L) kernel launches (and, compiled, that many
    more nodes in the traced graph). Chunks of 4 made an H200's eager 2,048-token prefill of
    mamba-130m take over 100 s (512 chunks x 24 layers of launches) and its compiled prefill
    too large to compile within minutes. So a GPU takes chunks up to 256 tokens while a
    tensor stays within 64 MiB: log2(256) = 8 passes over the chunk cost the bandwidth of
    a few milliseconds per layer, against a thousandfold fewer launches.
    """
    gpu = device is not None and device.type != "cpu"
    limit, cap = (GPU_CHUNK_ELEMENTS, MAX_GPU_CHUNK) if gpu else (CHUNK_ELEMENTS, MAX_CHUNK)
    length = 4
    while length < cap and 2 * length * batch * d_inner * d_state <= limit:
        length *= 2
    return length


def selective_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    state: torch.Tensor | None = None,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scan outputs y (B, T, d) = C_t · h_t (no D skip) and the final state h_T (B, d, N).

    x, dt: (B, T, d) with dt already softplus'd; A: (d, N); B, C: (B, T, N); ``state``: the
    state h_0 (B, d, N) before the first token (zeros when None); ``chunk``: tokens per
    chunk (default ``chunk_length`` for x's device). Computed in float32.
    """
    batch, T, d = x.shape
    N = A.shape[-1]
    chunk = chunk or chunk_length(batch, d, N, x.device)
    h = torch.zeros(batch, d, N, dtype=torch.float32, device=x.device) if state is None else state.float()
    x, dt, A, B, C = x.float(), dt.float(), A.float(), B.float(), C.float()
    outputs = []
    for start in range(0, T, chunk):
        stop = min(start + chunk, T)
        y, h = _scan_chunk(x[:, start:stop], dt[:, start:stop], A, B[:, start:stop], C[:, start:stop], h)
        outputs.append(y)
    y = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)  # (B, T, d)
    return y, h


def _scan_chunk(
    x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, h0: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk of L tokens: all L states by a log2(L)-step parallel scan, then C · h."""
    decay = torch.exp(dt[..., None] * A)  # (B, L, d, N)
    states = (dt * x)[..., None] * B[:, :, None, :]  # (B, L, d, N) the inputs dt·B·x
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, dt, A, B, C, h0)):
        states, decay = _prefix_scan_autograd(states, decay)
    else:
        states, decay = _prefix_scan_buffers(states, decay)
    states = torch.addcmul(states, decay, h0[:, None])  # (B, L, d, N): the entering state, decayed to each t
    y = torch.matmul(states, C[:, :, :, None]).squeeze(-1)  # (B, L, d)
    return y, states[:, -1].clone()


def _prefix_scan_buffers(states: torch.Tensor, decay: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hillis-Steele over dim 1: after the step of ``shift``, row t holds the scan over
    (t - 2·shift, t]. Each step reads one pair of buffers and writes the other (in place,
    a step would read rows it had already overwritten); no autograd (``out=``)."""
    L = states.shape[1]
    if L == 1:
        return states, decay
    states_out, decay_out = torch.empty_like(states), torch.empty_like(decay)
    shift = 1
    while shift < L:
        torch.addcmul(states[:, shift:], decay[:, shift:], states[:, :-shift], out=states_out[:, shift:])
        torch.mul(decay[:, shift:], decay[:, :-shift], out=decay_out[:, shift:])
        states_out[:, :shift] = states[:, :shift]
        decay_out[:, :shift] = decay[:, :shift]
        states, states_out, decay, decay_out = states_out, states, decay_out, decay
        shift *= 2
    return states, decay


def _prefix_scan_autograd(states: torch.Tensor, decay: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same scan with new tensors each step, so autograd keeps what it needs (training);
    about 15% slower than the buffers on the CPU."""
    shift = 1
    while shift < states.shape[1]:
        states = torch.cat(
            (states[:, :shift], torch.addcmul(states[:, shift:], decay[:, shift:], states[:, :-shift])), dim=1
        )
        decay = torch.cat((decay[:, :shift], decay[:, shift:] * decay[:, :-shift]), dim=1)
        shift *= 2
    return states, decay


def selective_step(
    x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, state: torch.Tensor
) -> torch.Tensor:
    """One token: x, dt (B, d), B, C (B, N); updates ``state`` (B, d, N) in place; y (B, d)."""
    x, dt = x.float(), dt.float()
    decay = torch.exp(dt[..., None] * A.float())  # (B, d, N)
    h = decay * state.float() + (dt * x)[..., None] * B.float()[:, None, :]  # (B, d, N)
    state.copy_(h.to(state.dtype))
    return torch.matmul(h, C.float()[:, :, None]).squeeze(-1)  # (B, d)

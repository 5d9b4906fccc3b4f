"""RWKV-4's WKV recurrence: a parallel scan for prompts, the recurrence for one token.

Per channel c, with decay ``w = -exp(time_decay) < 0`` and bonus ``u = time_first``, the
output for token t is

    wkv_t = (S_t + e^{u + k_t} v_t) / (D_t + e^{u + k_t}),
    S_t = sum_{i<t} e^{(t-1-i)w + k_i} v_i   (D_t: the same without v)

plus what the state carries in from earlier calls. transformers evaluates it one token at a
time (``rwkv_linear_attention_cpu``), keeping (num, den, max) with the max-trick.

A prompt here is one parallel scan, no loop over tokens: since (t-1-i)w + k_i =
(t-1)w + (k_i - i·w), S_t and D_t are ``e^{(t-1)w}`` times prefix sums of ``e^{k_i - i·w}``
(times v_i), and ``torch.logcumsumexp`` takes those prefix sums in log space, stably (the
max-trick inside the scan). Values are shifted by their minimum first (sum e·v =
sum e·(v - low) + low·sum e), so every summand is non-negative and has a logarithm. The exponents grow with the
position (i·|w|), so the scan runs in float64, which keeps the result within float32 rounding of the recurrence. Long
prompts are scanned in
chunks of ``CHUNK`` tokens carrying the state (the scan's tensors then stay in cache: about
1.4x faster than one scan over 1024 tokens here), so a prompt costs T / CHUNK iterations,
not T. One token (decode) takes the recurrence's step, in float32, as transformers does.

The state is (num, den, max): the sums are ``e^max · num`` and ``e^max · den``. ``den == 0``
means empty, so a zeroed cache is an empty state (its max is then ignored).

Padding (``valid`` False) neither updates the state nor counts as a step of decay: a
token's position counts only the real tokens before it.
"""

from __future__ import annotations

import torch

CHUNK = 64  # tokens per scan
NEG = -1e38  # a finite "minus infinity" for float32 maxima: exp(NEG - m) is 0 for any real m

State = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # num, den, max: (B, C) float32 each


def empty_state(batch_size: int, channels: int, device: torch.device) -> State:
    zeros = torch.zeros(batch_size, channels, dtype=torch.float32, device=device)
    return zeros, zeros.clone(), zeros.clone()


def wkv(
    w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor | None, state: State
) -> tuple[torch.Tensor, State]:
    """w, u (C,) float32 (w already -exp(time_decay)); k, v (B, T, C); valid (B, T) bool or
    None; state (num, den, max). Returns wkv (B, T, C) float32 and the state after the last token."""
    T = k.shape[1]
    if T == 1:
        return _step(w, u, k[:, 0].float(), v[:, 0].float(), None if valid is None else valid[:, 0], state)
    outs = []
    for start in range(0, T, CHUNK):  # T / CHUNK iterations, each a parallel scan
        part = slice(start, start + CHUNK)
        out, state = _scan(w, u, k[:, part], v[:, part], None if valid is None else valid[:, part], state)
        outs.append(out)
    return torch.cat(outs, dim=1) if len(outs) > 1 else outs[0], state


def _step(
    w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor | None, state: State
) -> tuple[torch.Tensor, State]:
    """One token: k, v (B, C) float32; transformers' update, an empty state read as zero."""
    num, den, top = state
    has = (den > 0).to(k.dtype)  # (B, C)
    top = torch.where(den > 0, top, NEG)  # (B, C)
    m = torch.maximum(top, u + k)  # (B, C)
    e1, e2 = torch.exp(top - m) * has, torch.exp(u + k - m)
    out = (e1 * num + e2 * v) / (e1 * den + e2)  # (B, C)
    m = torch.maximum(top + w, k)
    e1, e2 = torch.exp(top + w - m) * has, torch.exp(k - m)
    new = (e1 * num + e2 * v, e1 * den + e2, m)
    if valid is not None:  # a padding token leaves the state as it was
        new = tuple(torch.where(valid[:, None], n, old) for n, old in zip(new, state, strict=True))  # type: ignore[assignment]
    return out[:, None], new


def _scan(
    w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor | None, state: State
) -> tuple[torch.Tensor, State]:
    """A whole prompt at once: k, v (B, T, C); float64 inside (module doc)."""
    f64 = torch.float64
    B, T, C = k.shape
    num, den, top = state
    ok = torch.ones(B, T, dtype=torch.bool, device=k.device) if valid is None else valid  # (B, T)
    steps = ok.to(f64)
    pos = (torch.cumsum(steps, dim=1) - steps)[..., None]  # (B, T, 1): real tokens before t
    w64, k64, v64 = w.to(f64), k.to(f64), v.to(f64)
    ninf = torch.tensor(float("-inf"), dtype=f64, device=k.device)
    has = den > 0  # (B, C)
    # entry 0 is the carried state, a token at position -1 with weight e^max·den and value num/den
    state_log = torch.where(has, top.to(f64) + torch.log(den.to(f64)), ninf) + w64  # (B, C)
    state_value = torch.where(has, num / torch.where(has, den, 1.0), 0.0).to(f64)  # (B, C)
    logs = torch.cat([state_log[:, None], torch.where(ok[..., None], k64 - pos * w64, ninf)], dim=1)  # (B, T+1, C)
    values = torch.cat([state_value[:, None], torch.where(ok[..., None], v64, 0.0)], dim=1)  # (B, T+1, C); pads: 0
    # sum w·v = sum w·(v - low) + low·sum w, with v - low >= 0: two scans, no sign split
    low = values.amin(dim=1, keepdim=True)  # (B, 1, C)
    sums = [torch.logcumsumexp(logs, dim=1), torch.logcumsumexp(logs + torch.log(values - low), dim=1)]  # (B, T+1, C)
    log_d, log_n = (s[:, :-1] + (pos - 1) * w64 for s in sums)  # (B, T, C): the entries before t
    bonus = u.to(f64) + k64  # (B, T, C)
    m = torch.maximum(log_d, bonus)
    e_self, e_d = torch.exp(bonus - m), torch.exp(log_d - m)
    out = low + (torch.exp(log_n - m) + e_self * (v64 - low)) / (e_d + e_self)  # (B, T, C)
    total = pos[:, -1] + steps[:, -1:]  # (B, 1): real tokens in the call
    end_d, end_n = (s[:, -1] + (total - 1) * w64 for s in sums)  # (B, C): every entry, decayed to the end
    filled = torch.isfinite(end_d)  # (B, C): False only with no token and no state
    new_top = torch.where(filled, end_d, 0.0)
    new_num = torch.where(filled, torch.exp(end_n - new_top) + low[:, 0], 0.0)  # den is 1: num = the mean value
    return out.float(), (new_num.float(), filled.float(), new_top.float())


def wkv_reference(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The token-by-token recurrence as transformers writes it (for tests): (B, T, C)."""
    num = torch.zeros_like(k[:, 0])
    den = torch.zeros_like(k[:, 0])
    top = torch.full_like(k[:, 0], NEG)
    out = torch.zeros_like(k)
    for t in range(k.shape[1]):
        m = torch.maximum(top, k[:, t] + u)
        e1, e2 = torch.exp(top - m), torch.exp(k[:, t] + u - m)
        out[:, t] = (e1 * num + e2 * v[:, t]) / (e1 * den + e2)
        m = torch.maximum(top + w, k[:, t])
        e1, e2 = torch.exp(top + w - m), torch.exp(k[:, t] - m)
        num, den, top = e1 * num + e2 * v[:, t], e1 * den + e2, m
    return out

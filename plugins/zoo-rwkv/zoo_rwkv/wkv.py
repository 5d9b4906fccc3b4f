"""RWKV-4's WKV recurrence in chunks: exact, stable, and no Python loop per token.

Per channel c, with decay ``w = -exp(time_decay) < 0`` and bonus ``u = time_first``, the
output for token t is

    wkv_t = (sum_{i<t} e^{(t-1-i)w + k_i} v_i + e^{u + k_t} v_t) / (same sums without v)

plus what the state carries in from earlier calls. transformers evaluates it one token at a
time (``rwkv_linear_attention_cpu``), keeping (num, den, max) with the max-trick. Here a
chunk of T tokens is one tensor expression: the log-weights of every (t, i) pair (B, T, T, C)
and of the carried state, shifted by their maximum per (t, c) before ``exp`` (the same
max-trick, over a chunk), then one weighted sum. Chunks follow each other carrying the
state, so memory stays B·CHUNK²·C floats.

The state is (num, den, max): the sums are ``e^max · num`` and ``e^max · den``. ``den == 0``
means empty, so a zeroed cache is an empty state (the max is then ignored).

Padding (``valid`` False) neither updates the state nor counts as a step of decay: the
distance between tokens counts only real tokens in between.
"""

from __future__ import annotations

import torch

CHUNK = 32  # tokens per chunk: (B, 32, 32, C) float32 log-weights
NEG = -1e38  # a finite "minus infinity": exp(NEG - m) is 0 for any real m

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
    outs = []
    for start in range(0, T, CHUNK):  # one iteration per CHUNK tokens, not per token
        part = slice(start, start + CHUNK)
        out, state = _chunk(w, u, k[:, part].float(), v[:, part].float(), None if valid is None else valid[:, part], state)
        outs.append(out)
    return torch.cat(outs, dim=1) if len(outs) > 1 else outs[0], state


def _chunk(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor | None,
           state: State) -> tuple[torch.Tensor, State]:
    B, T, C = k.shape
    num, den, top = state
    ok = torch.ones(B, T, dtype=torch.bool, device=k.device) if valid is None else valid  # (B, T)
    steps = ok.to(torch.float32)  # (B, T)
    before = torch.cumsum(steps, dim=1) - steps  # (B, T): real tokens before t in this chunk
    has_state = den > 0  # (B, C)
    carried = torch.where(has_state, top, NEG)  # (B, C) log-scale of the carried sums
    # log-weights of earlier tokens i < t: (t-1-i) real steps of decay, then e^{k_i}
    dist = before[:, :, None] - before[:, None, :] - 1  # (B, T, T)
    earlier = torch.tril(torch.ones(T, T, dtype=torch.bool, device=k.device), -1) & ok[:, None, :]  # (B, T, T)
    logw = (dist[..., None] * w + k[:, None, :, :]).masked_fill(~earlier[..., None], NEG)  # (B, T, T, C)
    bonus = u + k  # (B, T, C): the current token's own weight
    from_state = carried[:, None, :] + before[..., None] * w  # (B, T, C)
    m = torch.maximum(torch.maximum(logw.amax(dim=2), bonus), from_state)  # (B, T, C)
    e = torch.exp(logw - m[:, :, None]) * earlier[..., None]  # (B, T, T, C)
    e_self = torch.exp(bonus - m)  # (B, T, C)
    e_state = torch.exp(from_state - m) * has_state[:, None, :]  # (B, T, C)
    numer = torch.einsum("btic,bic->btc", e, v) + e_self * v + e_state * num[:, None, :]  # (B, T, C)
    denom = e.sum(dim=2) + e_self + e_state * den[:, None, :]  # (B, T, C)
    out = numer / denom  # (B, T, C)
    # the state after the chunk: every real token decayed to the end, and the carried sums
    total = before[:, -1:] + steps[:, -1:]  # (B, 1)
    end_log = ((total - before - 1)[..., None] * w + k).masked_fill(~ok[..., None], NEG)  # (B, T, C)
    end_state = carried + total * w  # (B, C)
    new_top = torch.maximum(end_log.amax(dim=1), end_state)  # (B, C)
    e_end = torch.exp(end_log - new_top[:, None]) * ok[..., None]  # (B, T, C)
    e_carry = torch.exp(end_state - new_top) * has_state  # (B, C)
    new_num = (e_end * v).sum(dim=1) + e_carry * num  # (B, C)
    new_den = e_end.sum(dim=1) + e_carry * den  # (B, C)
    return out, (new_num, new_den, new_top)


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

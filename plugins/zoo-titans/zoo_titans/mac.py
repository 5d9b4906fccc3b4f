"""``titans-mac``: memory as context (Behrouz et al., 2025, section 4.1, eqs. 21-25).

The sequence is cut into segments of ``segment_len`` tokens, aligned to the cache's time
axis. For each segment S:

    h   = M*_{t-1}(q),  q = S W_Q                         (21-22: retrieve, no update)
    S~  = [p_1 .. p_Np] || h || S                         (the attention's context)
    y   = Attn(S~)                                        (23)
    M_t = M_{t-1}(y)                                      (24: the memory writes y)
    o   = y ⊗ M*_t(y)                                     (25)

Causal reading, so that a token never sees a later one: a segment token at offset p attends
to every persistent token, to the retrieved tokens h_0..h_p and to the segment's tokens
0..p (h_j is the retrieval for token j's query, so h_{j>p} would leak token j); the
memory's writes of y are token by token and each token reads M* after its own write (the
memory module's rule), while its gradients inside the segment are all taken at the
segment's first weights (the memory's chunk is the segment: eq. 24 is one step per
segment). Rotary positions (the model's ``positional``) rotate the segment's queries and
keys; persistent and retrieved tokens have no position.

State per sequence: the memory's (as MAL and MAG: weights, momentum, the segment's first
weights, the conv window) and the current segment's K/V: ``2 * segment_len`` slots (its
retrieved tokens, then its own), bounded by the segment, so declared per sequence.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from pydantic import Field, NonNegativeInt, PositiveInt, ValidationInfo, model_validator
from torch import nn

from zoo.parts import (
    BuildContext,
    LayerState,
    Linear,
    Positions,
    StateTensor,
    TokenMixer,
)
from zoo_titans.memory import MemoryOptions, NeuralMemory
from zoo_titans.memory_rule import mlp
from zoo_titans.mixers import memory_layout, sub_state


class MACOptions(MemoryOptions):
    """The memory's options, the segment, the persistent tokens and the attention's heads."""

    tiny: ClassVar[Mapping[str, Any]] = {**MemoryOptions.tiny, "n_kv_heads": 2, "segment_len": 4, "n_persistent": 2}
    follows: ClassVar[Mapping[str, str]] = {"chunk_size": "segment_len"}

    segment_len: PositiveInt = Field(512, description="tokens per segment: the attention's span and the memory's step")
    chunk_size: PositiveInt | None = Field(  # type: ignore[assignment]
        None, description="the memory's chunk: MAC's segment (default, and the only value allowed: segment_len)"
    )
    n_persistent: NonNegativeInt = Field(
        16, description="learned persistent memory tokens N_p prepended to each segment"
    )
    n_kv_heads: PositiveInt | None = Field(None, description="attention's key/value heads; default n_heads")
    qk_norm: bool = Field(False, description="norm (the model's norm kind) on each attention head of q and k")
    bias: bool = Field(False, description="bias on attention's q, k and v projections")

    @model_validator(mode="before")
    @classmethod
    def _chunk_is_segment(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and data.get("chunk_size") is None:
            data = {**data, "chunk_size": data.get("segment_len", cls.model_fields["segment_len"].default)}
        return data

    @model_validator(mode="after")
    def _check(self) -> MACOptions:
        if self.chunk_size != self.segment_len:
            raise ValueError(
                f"chunk_size: MAC's memory steps once per segment (eq. 24); allowed: segment_len "
                f"({self.segment_len}), got {self.chunk_size}"
            )
        if self.n_heads % (self.n_kv_heads or self.n_heads):
            raise ValueError(
                f"n_kv_heads: n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads}; "
                "allowed: a divisor of n_heads"
            )
        return self


class TitansMAC(TokenMixer):
    """``titans-mac``: segment attention over [persistent | retrieved | segment], then y ⊗ M*(y)."""

    def __init__(self, options: MACOptions, ctx: BuildContext) -> None:
        super().__init__()
        self.memory = NeuralMemory(options, ctx)
        d, H, hd = ctx.d_model, options.n_heads, self.memory.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = H, options.n_kv_heads or H, hd
        self.segment_len, self.eps = options.segment_len, options.eps
        self.persistent = nn.Parameter(torch.empty(options.n_persistent, d))
        self.retrieve_q = Linear(d, H * hd, bias=False)  # W_Q of eq. 21
        self.retrieve_o = Linear(H * hd, d, bias=False)  # the memory's read, back to d_model
        self.q_proj = Linear(d, H * hd, bias=options.bias)
        self.kv_proj = Linear(d, 2 * self.n_kv_heads * hd, bias=options.bias)
        self.o_proj = Linear(H * hd, d, bias=False)
        self.q_norm = ctx.make_norm(hd) if options.qk_norm else None
        self.k_norm = ctx.make_norm(hd) if options.qk_norm else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if not self.persistent.is_meta:
            nn.init.normal_(self.persistent, std=self.persistent.shape[-1] ** -0.5)

    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        """The segment's K/V slots (retrieved, then segment tokens) and the memory's state."""
        slots = StateTensor((batch_size, self.n_kv_heads, 2 * self.segment_len, self.head_dim), per="sequence")
        return {"k": slots, "v": slots, **memory_layout(self.memory, batch_size, "memory.")}

    def forward(self, x: torch.Tensor, positions: Positions, state: LayerState | None = None) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d), segment by segment (each needs the memory the last one wrote)."""
        T = x.shape[1]
        if state is None:  # the same path as a cached call, on a scratch state
            state = self._scratch(x, positions)
        q, k, v = self._project(x)  # (B, H, T, hd), (B, Hkv, T, hd) x 2
        q, k = positions.rotate(q, k)
        first = (state.filled - T) if state.filled is not None else (0 if T == 1 else int(state.time[0]))
        outs, at = [], 0
        while at < T:
            end = min(T, at + self.segment_len - (first + at) % self.segment_len)
            piece = dataclasses.replace(
                state,
                time=state.time[at:end],
                filled=None if state.filled is None else state.filled - T + end,
                token_valid=None if state.token_valid is None else state.token_valid[:, at:end],
            )
            y = self._attend(x[:, at:end], q[:, :, at:end], k[:, :, at:end], v[:, :, at:end], piece)  # (B, n, d)
            outs.append(y * self.memory(y, sub_state(piece, "memory."), piece.token_valid))  # eq. 25
            at = end
        return torch.cat(outs, dim=1)

    def _scratch(self, x: torch.Tensor, positions: Positions) -> LayerState:
        B, T, _ = x.shape
        tensors = {
            name: torch.zeros(t.shape, dtype=t.dtype or x.dtype, device=x.device)
            for name, t in self.state_layout(B, T).items()
        }
        valid = positions.key_valid
        return LayerState(tensors, torch.arange(T, device=x.device), valid, T, filled=T, token_valid=valid)

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k, v = self._kv(x)
        return (q if self.q_norm is None else self.q_norm(q)), k, v

    def _kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, T, _ = x.shape
        k, v = self.kv_proj(x).view(B, T, 2, self.n_kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (B, Hkv, T, hd)
        return (k if self.k_norm is None else self.k_norm(k)), v

    def _attend(
        self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, piece: LayerState
    ) -> torch.Tensor:
        """One segment's tokens (n of them, all in one segment): retrieve, write the segment's
        K/V slots, attend over [persistent | retrieved | segment] causally. -> y (B, n, d)."""
        B, n, _ = x.shape
        H, hd, seg = self.n_heads, self.head_dim, self.segment_len
        weights = self.memory.chunk_start_weights(sub_state(piece, "memory."), 0)  # M*_{t-1}: the segment's start
        r = F.normalize(self.retrieve_q(x).view(B, n, H, hd).transpose(1, 2).float(), dim=-1, eps=self.eps)
        h = self.retrieve_o(mlp(weights, r).transpose(1, 2).reshape(B, n, H * hd).to(x.dtype))  # (B, n, d): eq. 22
        kh, vh = self._kv(h)  # (B, Hkv, n, hd): retrieved tokens carry no position
        slot = piece.time % seg  # (n,)
        keys, values = piece.tensors["k"], piece.tensors["v"]  # (B, Hkv, 2 seg, hd)
        for cache, retrieved, own in ((keys, kh, k), (values, vh, v)):
            cache.index_copy_(2, slot, retrieved.to(cache.dtype))
            cache.index_copy_(2, slot + seg, own.to(cache.dtype))
        kp, vp = self._kv(self.persistent.to(x.dtype).expand(B, -1, -1))  # (B, Hkv, Np, hd)
        keys, values = torch.cat([kp, keys.to(q.dtype)], dim=2), torch.cat([vp, values.to(q.dtype)], dim=2)
        out = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=self._mask(piece, slot, kp.shape[2]), enable_gqa=True
        )  # (B, H, n, hd)
        return self.o_proj(out.transpose(1, 2).reshape(B, n, H * hd))

    def _mask(self, piece: LayerState, slot: torch.Tensor, n_persistent: int) -> torch.Tensor:
        """(B, 1, n, Np + 2 seg): persistent tokens always; slot j of either half when j <= the
        query's offset and its token is no padding (a padded query still sees itself)."""
        seg, n = self.segment_len, slot.shape[0]
        j = torch.arange(seg, device=slot.device)
        earlier = j[None, :] <= slot[:, None]  # (n, seg)
        own = j[None, :] == slot[:, None]  # (n, seg)
        if piece.key_valid is None:
            half = earlier[None].expand(1, n, seg)  # (1, n, seg)
        else:
            times = (piece.time[0] - slot[0] + j).clamp(max=piece.key_valid.shape[1] - 1)  # (seg,)
            valid = piece.key_valid[:, times]  # (B, seg)
            half = earlier[None] & (valid[:, None, :] | own[None])  # (B, n, seg)
        persistent = torch.ones(*half.shape[:2], n_persistent, dtype=torch.bool, device=slot.device)
        return torch.cat([persistent, half, half], dim=-1)[:, None]

    def score_flops(self, n_new: int, context_len: int) -> int:
        """The memory's (write, momentum, read of y) plus, per token and head, the retrieval
        through the MLP (2P) and attention over Np + 2 (p + 1) keys, p the token's offset in
        its segment: Np + seg + 1 on average (2 hd each for the scores and the values)."""
        per_head = 2 * sum(math.prod(s[1:]) for s in self.memory.weight_shapes())
        keys = self.persistent.shape[0] + self.segment_len + 1
        return self.memory.score_flops(n_new) + n_new * self.n_heads * (per_head + 4 * self.head_dim * keys)

    def executed_score_flops(self, n_new: int, context_len: int) -> int:
        return (
            self.score_flops(n_new, context_len)
            - self.memory.score_flops(n_new)
            + self.memory.executed_score_flops(n_new)
        )

    def matmul_param_count(self) -> int:
        linears = (self.retrieve_q, self.retrieve_o, self.q_proj, self.kv_proj, self.o_proj)
        return self.memory.matmul_param_count() + sum(p.numel() for m in linears for p in m.parameters())


def build_mac(options: MACOptions, ctx: BuildContext) -> TitansMAC:
    return TitansMAC(options, ctx)

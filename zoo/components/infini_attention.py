"""Infini-attention (Munkhdalai et al. 2024, arXiv 2404.07143): the `attention` kind ``infini``.

The sequence is cut into segments of ``segment`` tokens by position (position p is in
segment p // S). A token attends with causal softmax to the tokens of its own segment so
far (local), and reads a compressive memory that the preceding *complete* segments wrote:
A_mem = σ(q) M / (σ(q) z + eps), σ = elu + 1. When a segment's last token has been seen,
its keys and values are written: M += σ(K)ᵀ V (``update: linear``) or the delta rule
M += σ(K)ᵀ (V − σ(K) M / (σ(K) z + eps)) (``update: delta``), and z += Σ σ(K). The output
is sigmoid(β) ⊙ A_mem + (1 − sigmoid(β)) ⊙ A_local with a learned β per head, then o_proj.

Decode maps onto segments by position, never by call: a one-token step attends to the
ring of the last ``segment`` keys restricted to its own segment, and if it is a segment's
last token it writes that segment (the ring holds all of it) into M after reading. So any
split of a sequence into prefill chunks and steps gives the full forward's outputs.

State: ``mem`` (B, H, D, D) and ``z`` (B, H, D), float32 (or the cache's dtype with
``state_dtype: cache``), per sequence; ``k``, ``v``
(B, H, min(segment, max_len), D) per token, a ring (slot = time mod its length) like a
sliding window's. Positions for segmenting count real tokens only (cache time minus the
row's left pads; uncached, the running count of the attention mask), and padding keys add
nothing to M, z or the local softmax, so a left-padded row equals its unpadded run. RoPE,
when the layer has it, rotates q and k before both paths (as ``linear`` does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from pydantic import Field, PositiveInt
from torch import nn

from zoo.components import cpu_steps
from zoo.components.feature_state import FeatureStateMixer, FeatureStateOptions, feature_map, state_read, state_write
from zoo.components.kernels import KernelChoice
from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, Positions, TokenNorm
from zoo.specs.state import LayerState, StateTensor

STATE = ("mem", "z")


class InfiniAttentionOptions(FeatureStateOptions):
    segment: PositiveInt = Field(64, description="tokens per segment: local attention inside, memory across")
    update: Literal["linear", "delta"] = Field("linear", description="memory update: linear sum or delta rule")
    bias: bool = Field(False, description="bias on the q, k, v and output projections")


def segment_keys_seen(n_new: int, context_len: int, segment: int) -> int:
    """Keys attended by the causal local softmax of ``n_new`` queries ending at
    ``context_len``: the query at position p sees (p mod segment) + 1 keys."""

    def prefix(p: int) -> int:  # positions 0 .. p-1
        full, rest = divmod(p, segment)
        return full * segment * (segment + 1) // 2 + rest * (rest + 1) // 2

    return prefix(context_len) - prefix(context_len - n_new)


class InfiniAttention(FeatureStateMixer, KernelChoice):
    """Local softmax attention per segment plus a compressive memory across segments.

    Implementations (``zoo.components.kernels``): ``reference`` (the PyTorch code below,
    decode steps included) and ``cpu-step`` (``cpu_steps``: a decode step's local softmax over
    the ring, memory read, segment write and ring write as one C++ call; inference only)."""

    kernel_family = "infini"
    kernels = (cpu_steps.KERNEL,)

    def __init__(self, options: InfiniAttentionOptions, ctx: BuildContext) -> None:
        super().__init__(options, ctx, bias=options.bias)
        self.segment = options.segment
        self.delta = options.update == "delta"
        self.gate = nn.Parameter(torch.empty(self.n_heads))  # β per head
        self.choose_kernel()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """β = 0: memory and local attention start equally weighted."""
        if not self.gate.is_meta:
            with torch.no_grad():
                self.gate.zero_()

    # ---- state ----------------------------------------------------------------------------
    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        """M and z per sequence (``state_dtype``: float32 unless the spec says ``cache``); the current segment's K/V
        as a ring of at most ``segment`` slots per token (the cache's dtype)."""
        H, D = self.n_heads, self.head_dim
        ring = (batch_size, H, min(self.segment, max_len), D)
        return {
            "mem": StateTensor((batch_size, H, D, D), self.state_dtype, per="sequence"),
            "z": StateTensor((batch_size, H, D), self.state_dtype, per="sequence"),
            "k": StateTensor(ring),
            "v": StateTensor(ring),
        }

    def score_flops(self, n_new: int, context_len: int) -> int:
        """Local q·kᵀ and probs·v over the segment so far (4·D per key), plus per token and
        head the memory read σ(q)M, σ(q)z (2·D² + 2·D) and write σ(k)ᵀv, z (2·D² + D); the
        delta rule first reads σ(k)M, σ(k)z and subtracts it from v (2·D² + 3·D more)."""
        D = self.head_dim
        local = 4 * D * segment_keys_seen(n_new, context_len, self.segment)
        per_token = 4 * D * D + 3 * D + (2 * D * D + 3 * D if self.delta else 0)
        return self.n_heads * (local + n_new * per_token)

    # ---- forward --------------------------------------------------------------------------
    def _step_ready(self, x: torch.Tensor, state: LayerState) -> bool:
        """Whether this one-token call runs the fused step: the K/V ring float32 or the model's
        dtype (``cpu_steps.window_fits``), M and z float32 (``cpu_steps.step_ready``)."""
        tensors = state.tensors
        if not all(cpu_steps.window_fits(tensors[name], x) for name in ("k", "v")):
            return False
        return cpu_steps.step_ready(self, x, (tensors["mem"], tensors["z"]), state.token_valid)

    def forward(
        self, x: torch.Tensor, positions: Positions | None = None, state: LayerState | None = None
    ) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d); with a state, M and z are updated and the ring written
        in place. Tokens marked False in ``token_valid`` (left padding) write nothing."""
        B, T, _ = x.shape
        if T == 1 and state is not None and self._step_ready(x, state):
            valid_slots = None if state.key_valid is None else state.key_valid.to(torch.bool)
            out = self._token_step(x, positions, state, valid_slots) if B == 1 else None
            if out is not None:
                return out  # (1, 1, d): the q|k|v product, the step and o_proj in one C++ call
            q, k, v = self.project(x, positions)  # (B, H, 1, D) each
            y = cpu_steps.infini_step(
                q, k, v, state.tensors, self.gate, valid_slots, state.time, self.segment, self.delta
            )
            return self.output(y, x.dtype)  # (B, T, d); the ring, M and z updated in place
        q, k, v = self.project(x, positions)  # (B, H, T, D) each
        pos, valid = self._token_positions(B, T, x.device, positions, state)  # (B, T) each
        ext_k, ext_v, ext_pos, ext_valid = self._extend(k, v, pos, valid, state)  # ring + new, along time
        local = self._local(q.float(), ext_k.float(), ext_v.float(), pos, ext_pos, ext_valid)  # (B, H, T, D)
        mem, z = self.load_state(state, STATE, B, x.device)
        keys = feature_map(ext_k.float()) * ext_valid[:, None, :, None]  # (B, H, R+T, D): padding writes nothing
        read, mem, z = self._memory(feature_map(q.float()), keys, ext_v.float(), pos, valid, mem, z)
        self.store_state(state, STATE, mem, z)
        if state is not None:
            self._write_ring(k, v, state)
        g = torch.sigmoid(self.gate.float())[None, :, None, None]  # (1, H, 1, 1)
        y = g * read + (1.0 - g) * local  # (B, H, T, D)
        return self.output(y, x.dtype)

    def residual_token(
        self, x: torch.Tensor, norm: TokenNorm, positions: Positions, state: LayerState
    ) -> torch.Tensor | None:
        """x + this attention of norm(x) for one cached token (1, 1, d) in one C++ call (``_token_step``)."""
        if x.shape[0] != 1 or x.shape[1] != 1 or not self._step_ready(x, state):
            return None
        valid_slots = None if state.key_valid is None else state.key_valid.to(torch.bool)
        return self._token_step(x, positions, state, valid_slots, norm)

    def _token_step(
        self,
        x: torch.Tensor,
        positions: Positions | None,
        state: LayerState,
        valid_slots: torch.Tensor | None,
        norm: TokenNorm | None = None,
    ) -> torch.Tensor | None:
        """One token (1, 1, d) through ``cpu_steps.infini_token`` (with ``norm``: x + the
        attention of norm(x)) where the layers take it (``token_projections``), else None: the
        module's own calls."""
        projections = self.token_projections(positions)
        if projections is None:
            return None
        qkv, out = projections
        segment = (self.segment, self.delta)
        tensors, time = state.tensors, state.time
        return cpu_steps.infini_token(x, qkv, tensors, self.gate, valid_slots, time, segment, out, norm)

    def _token_positions(
        self, B: int, T: int, device: torch.device, positions: Positions | None, state: LayerState | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions that count real tokens only (B, T) and validity (B, T). Cached: time
        minus the row's left pads (pads get negative positions); uncached: the running
        count of the attention mask."""
        if state is not None:
            pads = (
                torch.zeros(B, dtype=torch.long, device=device)
                if state.key_valid is None
                else (~state.key_valid).sum(-1)
            )
            pos = state.time[None, :] - pads[:, None]  # (B, T)
            valid = (
                state.token_valid
                if state.token_valid is not None
                else torch.ones(B, T, dtype=torch.bool, device=device)
            )
            return pos, valid
        mask = None if positions is None else positions.key_valid
        if mask is None:
            return torch.arange(T, device=device)[None, :].expand(B, T), torch.ones(
                B, T, dtype=torch.bool, device=device
            )
        mask = mask.to(torch.bool)
        return mask.long().cumsum(-1) - 1, mask

    def _extend(
        self, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, valid: torch.Tensor, state: LayerState | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The ring's R keys/values in time order before this call's T: k, v (B, H, R+T, D),
        positions and validity (B, R+T). Uncached, R = 0."""
        if state is None:
            return k, v, pos, valid
        ring_k, ring_v = state.tensors["k"], state.tensors["v"]
        R = ring_k.shape[2]
        t0 = state.time[0]
        times = t0 - R + torch.arange(R, device=k.device)  # (R,) oldest first; negative: never written
        slots = times.remainder(R)
        old_valid = (times >= 0)[None, :].expand(k.shape[0], R)  # (B, R)
        if state.key_valid is not None:
            old_valid = old_valid & state.key_valid[:, times.clamp(min=0)]
        old_pos = pos[:, :1] - (state.time[0] - times)[None, :]  # (B, R): same pads as this call
        ext_k = torch.cat([ring_k.index_select(2, slots).to(k.dtype), k], dim=2)
        ext_v = torch.cat([ring_v.index_select(2, slots).to(v.dtype), v], dim=2)
        return ext_k, ext_v, torch.cat([old_pos, pos], dim=1), torch.cat([old_valid, valid], dim=1)

    def _local(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        pos: torch.Tensor,
        key_pos: torch.Tensor,
        key_valid: torch.Tensor,
    ) -> torch.Tensor:
        """Causal softmax inside each query's segment, one block of ``segment`` queries at a
        time against the keys it can reach (at most 2·segment - 1): q (B, H, T, D), k, v
        (B, H, R+T, D) -> (B, H, T, D). A padding query sees only itself (no empty row)."""
        S, T, R = self.segment, q.shape[2], k.shape[2] - q.shape[2]
        out = []
        for a in range(0, T, S):
            b = min(a + S, T)
            lo = max(0, R + a - S + 1)
            qp, kp = pos[:, a:b, None], key_pos[:, None, lo : R + b]  # (B, L, 1), (B, 1, K)
            seen = (
                key_valid[:, None, lo : R + b]
                & (kp <= qp)
                & (kp.div(S, rounding_mode="floor") == qp.div(S, rounding_mode="floor"))
            )
            own = (
                torch.arange(R + a, R + b, device=q.device)[:, None]
                == torch.arange(lo, R + b, device=q.device)[None, :]
            )
            seen = (seen | own)[:, None]  # (B, 1, L, K)
            scores = (
                torch.matmul(q[:, :, a:b], k[:, :, lo : R + b].transpose(-1, -2)) * self.head_dim**-0.5
            )  # (B, H, L, K)
            probs = scores.masked_fill(~seen, float("-inf")).softmax(dim=-1)
            out.append(torch.matmul(probs, v[:, :, lo : R + b]))  # (B, H, L, D)
        return out[0] if len(out) == 1 else torch.cat(out, dim=2)

    def _memory(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        pos: torch.Tensor,
        valid: torch.Tensor,
        mem: torch.Tensor,
        z: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Memory reads for σ(q) (B, H, T, D) and the writes of every segment that ends in
        this call, from σ(k), v (B, H, R+T, D). Per block of ``segment`` tokens a row ends at
        most one segment: tokens up to its end read M before the write, later ones after."""
        S, T, R = self.segment, q.shape[2], k.shape[2] - q.shape[2]
        B, H, _, D = q.shape
        reads = []
        for a in range(0, T, S):
            b = min(a + S, T)
            ends = valid[:, a:b] & (pos[:, a:b].remainder(S) == S - 1)  # (B, L)
            read = state_read(q[:, :, a:b], mem, z)  # (B, H, L, D)
            last = R + a + ends.long().argmax(-1)  # (B,) ext index of the segment's last token
            index = (last[:, None] - S + 1 + torch.arange(S, device=q.device)).clamp(min=0)  # (B, S)
            index = index[:, None, :, None].expand(B, H, S, D)
            seg_k = k.gather(2, index) * ends.any(-1)[:, None, None, None]  # (B, H, S, D); no end: writes nothing
            mem, z = state_write(seg_k, v.gather(2, index), mem, z, self.delta)
            if b - a > 1:
                after = ((ends.long().cumsum(-1) - ends.long()) > 0)[:, None, :, None]  # (B, 1, L, 1)
                read = torch.where(after, state_read(q[:, :, a:b], mem, z), read)
            reads.append(read)
        return (reads[0] if len(reads) == 1 else torch.cat(reads, dim=2)), mem, z

    def _write_ring(self, k: torch.Tensor, v: torch.Tensor, state: LayerState) -> None:
        """Keep this call's last R keys/values at slots time mod R."""
        ring_k, ring_v = state.tensors["k"], state.tensors["v"]
        R = ring_k.shape[2]
        time = state.time[-R:]
        ring_k.index_copy_(2, time.remainder(R), k[:, :, -R:].to(ring_k.dtype))
        ring_v.index_copy_(2, time.remainder(R), v[:, :, -R:].to(ring_v.dtype))

    def extra_repr(self) -> str:
        update = "delta" if self.delta else "linear"
        return f"heads={self.n_heads}, head_dim={self.head_dim}, segment={self.segment}, update={update}"


def build_infini_attention(options: InfiniAttentionOptions, ctx: BuildContext) -> InfiniAttention:
    """Infini-attention: local softmax per segment plus a compressive memory."""
    return InfiniAttention(options, ctx)


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register("attention", "infini", build_infini_attention, options=InfiniAttentionOptions, module=InfiniAttention)

"""Titans' neural long-term memory as a module: projections, convolutions, gates, and the
memory MLP's weights as per-sequence state.

Per token (Behrouz et al., 2025, section 4.4): q, k, v are linear projections, each through a
depthwise causal convolution and SiLU, q and k L2-normalised per head; eta, theta and alpha
are data-dependent (sigmoids of a projection of the input, per head; theta scaled by
``max_lr``). The retrieved values are RMS-normalised per head and gated by SiLU of a linear
projection of the input before the output projection ("normalization and gating with a
linear layer before the final output projection").

State per sequence, declared in ``state_layout``: the convolution window (the cache's dtype)
and, per MLP layer, the weights' offset from the learned initial memory ``M_0`` and the
momentum ``S`` (``state_dtype``, float32 by default); with chunks of more than one token
also the weights at the current chunk's start, where the chunk's gradients are taken, so a
token-by-token decode computes what the chunked forward does. Storing the offset from ``M_0``
makes a zeroed state the fresh memory, as the cache allocates and resets it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt
from torch import nn

from zoo.parts import BuildContext, LayerState, Linear, Options
from zoo_titans.memory_rule import Gates, Weights, segment


class MemoryOptions(Options):
    """The neural memory's options (the MAL kind's whole option set; MAG and MAC add attention's)."""

    tiny: ClassVar[Mapping[str, Any]] = {"n_heads": 4, "head_dim": 16, "chunk_size": 4}

    n_heads: PositiveInt = Field(8, description="memory heads, each an MLP over head_dim channels")
    head_dim: PositiveInt | None = Field(None, description="channels per head; default d_model // n_heads")
    memory_depth: PositiveInt = Field(2, description="layers L_M of the memory MLP (>= 1; 1 is a linear memory)")
    memory_expansion: PositiveInt = Field(2, description="hidden width of the memory MLP, in multiples of head_dim")
    chunk_size: PositiveInt = Field(
        16, description="tokens per chunk: gradients inside a chunk are taken at its first weights (section 3.2)"
    )
    conv_kernel: PositiveInt = Field(4, description="width of the causal convolution over q, k, v")
    max_lr: float = Field(0.1, gt=0, description="theta_t = max_lr * sigmoid(.): the largest step size")
    eps: float = Field(1e-6, gt=0, description="epsilon of the output RMS norm and the q/k L2 norms")


class NeuralMemory(nn.Module):
    """x (B, T, d) -> gated, normalised M_t(q_t) projected back to (B, T, d)."""

    def __init__(self, options: MemoryOptions, ctx: BuildContext) -> None:
        super().__init__()
        self.n_heads = options.n_heads
        self.head_dim = int(options.head_dim or ctx.d_model // options.n_heads)
        self.depth, self.chunk_size, self.max_lr, self.eps = (
            options.memory_depth,
            options.chunk_size,
            options.max_lr,
            options.eps,
        )
        self.state_dtype = ctx.state_dtype
        d, inner, hd = ctx.d_model, self.n_heads * self.head_dim, self.head_dim
        self.qkv_proj = Linear(d, 3 * inner, bias=False)
        self.conv = nn.Conv1d(3 * inner, 3 * inner, options.conv_kernel, groups=3 * inner, bias=False)
        self.gates_proj = Linear(d, 3 * self.n_heads, bias=False)  # eta, theta, alpha per head
        self.gates_bias = nn.Parameter(torch.empty(3 * self.n_heads))  # not a Linear's: zoo zeroes those
        self.gate_proj = Linear(d, inner, bias=False)
        self.norm_weight = nn.Parameter(torch.empty(hd))
        dims = [hd] + [hd * options.memory_expansion] * (self.depth - 1) + [hd]
        self.memory = nn.ParameterList(
            [nn.Parameter(torch.empty(self.n_heads, o, i)) for i, o in itertools.pairwise(dims)]
        )
        self.o_proj = Linear(inner, d, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.norm_weight.is_meta:
            return
        nn.init.ones_(self.norm_weight)
        for w in self.memory:
            nn.init.normal_(w, std=w.shape[-1] ** -0.5)
        with torch.no_grad():  # keep most momentum, half the largest step, forget little
            self.gates_bias.copy_(torch.tensor([2.0, 0.0, -4.0]).repeat_interleave(self.n_heads))

    def weight_shapes(self) -> list[tuple[int, ...]]:
        """Per-head (out, in) of each memory MLP layer, with the head axis: (H, out, in)."""
        return [tuple(w.shape) for w in self.memory]

    def state_shapes(self, batch_size: int) -> dict[str, tuple[int, ...]]:
        """The conv window, then per layer l: ``weight.l`` (offset from M_0), ``momentum.l``,
        and ``anchor.l`` (offset of the chunk's first weights) when chunks exceed one token."""
        conv = self.conv
        shapes: dict[str, tuple[int, ...]] = {"conv": (batch_size, conv.in_channels, conv.kernel_size[0] - 1)}
        kinds = ("weight", "momentum", "anchor") if self.chunk_size > 1 else ("weight", "momentum")
        for kind in kinds:
            for i, shape in enumerate(self.weight_shapes()):
                shapes[f"{kind}.{i}"] = (batch_size, *shape)
        return shapes

    def matmul_param_count(self) -> int:
        """The projections; the conv taps, gate biases, norm scale and the memory's initial
        weights are elementwise or copied into the state, counted in ``score_flops``."""
        return sum(
            p.numel() for m in (self.qkv_proj, self.gates_proj, self.gate_proj, self.o_proj) for p in m.parameters()
        )

    def score_flops(self, n_new: int) -> int:
        """Per token and head, with P the memory's weights per head: the MLP at the anchor
        (2P), the backward pass (2P), the rank-one gradients (P), the momentum and weight
        updates (3P each) and the retrieval (2P): 13P; plus the convolution (2 per tap and
        channel). The chunked prefill's C x C products are in ``executed_score_flops``."""
        per_head = 13 * sum(math.prod(s[1:]) for s in self.weight_shapes())
        return n_new * (self.n_heads * per_head + 2 * self.conv.in_channels * self.conv.kernel_size[0])

    def executed_score_flops(self, n_new: int) -> int:
        """A chunked call also forms, per chunk, layer and head, the C x C scores and their
        product with the deltas (2 C (in + out) per token) and the decay matrices."""
        if n_new == 1:
            return self.score_flops(1)
        C = self.chunk_size
        per_token = sum(2 * C * (s[1] + s[2]) for s in self.weight_shapes()) + 4 * C * C
        return self.score_flops(n_new) + -(-n_new // C) * C * self.n_heads * per_token

    def _project(self, x: torch.Tensor, window: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        """q, k, v (B, H, T, D) float32 through conv + SiLU (q, k L2-normalised); the window
        (B, C, K-1) continues and is updated in place."""
        B, T, _ = x.shape
        qkv = self.qkv_proj(x).transpose(1, 2)  # (B, 3HD, T)
        history = (
            qkv.new_zeros(B, qkv.shape[1], self.conv.kernel_size[0] - 1) if window is None else window.to(qkv.dtype)
        )
        full = torch.cat([history, qkv], dim=-1)  # (B, 3HD, K-1+T)
        if window is not None:
            window.copy_(full[:, :, full.shape[-1] - window.shape[-1] :])
        qkv = F.silu(self.conv(full).float())  # (B, 3HD, T)
        q, k, v = qkv.view(B, 3, self.n_heads, self.head_dim, T).permute(1, 0, 2, 4, 3)  # 3 x (B, H, T, D)
        return F.normalize(q, dim=-1, eps=self.eps), F.normalize(k, dim=-1, eps=self.eps), v

    def _gates(self, x: torch.Tensor, valid: torch.Tensor | None) -> Gates:
        """eta, theta, alpha (B, H, T) from x; padding tokens (valid False) write nothing."""
        raw = self.gates_proj(x).float() + self.gates_bias.float()  # (B, T, 3H)
        eta, theta, alpha = raw.view(*x.shape[:2], 3, self.n_heads).permute(2, 0, 3, 1)
        gates = Gates(F.logsigmoid(eta), self.max_lr * torch.sigmoid(theta), F.logsigmoid(-alpha))  # (B, H, T) each
        if valid is not None:
            keep = valid[:, None, :]  # (B, 1, T)
            gates = Gates(gates.log_eta * keep, gates.theta * keep, gates.log_keep * keep)
        return gates

    def forward(self, x: torch.Tensor, state: LayerState | None, valid: torch.Tensor | None) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d). ``valid`` (B, T): False at (left) padding, which leaves
        the memory untouched. With ``state`` the memory continues from and updates it."""
        B, T, _ = x.shape
        if valid is not None:
            x = x * valid[..., None].to(x.dtype)  # padding: zero inputs, as an empty conv window
        tensors = None if state is None else state.tensors
        q, k, v = self._project(x, None if tensors is None else tensors["conv"])
        y = self._write_and_read(q, k, v, self._gates(x, valid), state)  # (B, H, T, D)
        y = F.rms_norm(y, (self.head_dim,), eps=self.eps) * self.norm_weight.float()
        y = y.transpose(1, 2).reshape(B, T, -1).to(x.dtype)  # (B, T, HD)
        return self.o_proj(y * F.silu(self.gate_proj(x)))

    def chunk_start_weights(self, state: LayerState, step: int) -> Weights:
        """The memory before token ``step`` of this call writes, as of its chunk's start: the
        current weights at a chunk boundary of the cache's time axis, else the stored anchor.
        MAC retrieves with these (eq. 21: h_t = M*_{t-1}(q_t), the memory before the segment)."""
        init = self._initial(state.tensors["conv"].shape[0])
        current = [w + state.tensors[f"weight.{i}"] for i, w in enumerate(init)]
        if self.chunk_size == 1:
            return current
        anchor = [w + state.tensors[f"anchor.{i}"] for i, w in enumerate(init)]
        if state.filled is not None:  # eager: the time is known on the host
            return current if (state.filled - state.time.shape[0] + step) % self.chunk_size == 0 else anchor
        boundary = state.time[step] % self.chunk_size == 0  # compiled: a device-side test, as in _write_and_read
        return [torch.where(boundary, c, a) for c, a in zip(current, anchor)]

    def _initial(self, batch: int) -> Weights:
        return [w.float().expand(batch, *w.shape) for w in self.memory]

    def _write_and_read(self, q, k, v, gates: Gates, state: LayerState | None) -> torch.Tensor:  # type: ignore[no-untyped-def]
        """Run the rule over segments that end at chunk boundaries of the cache's time axis."""
        B, _, T, _ = q.shape
        init = self._initial(B)
        if state is None:
            start, momentum, anchor, first = init, [torch.zeros_like(w) for w in init], init, 0
        else:
            t = state.tensors
            start = [w + t[f"weight.{i}"] for i, w in enumerate(init)]
            momentum = [t[f"momentum.{i}"].float() for i in range(self.depth)]
            anchor = [w + t[f"anchor.{i}"] for i, w in enumerate(init)] if self.chunk_size > 1 else start
            first = (state.filled - T) if state.filled is not None else (0 if T == 1 else int(state.time[0]))
        ys, at, moved = [], 0, False  # moved: the anchor changed in this call (else it need not be stored)
        while at < T:
            end = min(T, at + self.chunk_size - (first + at) % self.chunk_size)
            if state is None or state.filled is not None or self.chunk_size == 1:  # the time is known on the host
                if (first + at) % self.chunk_size == 0:
                    anchor, moved = start, True
            else:  # device-side test: a compiled one-token step never reads the time on the host
                boundary = state.time[at] % self.chunk_size == 0
                anchor, moved = [torch.where(boundary, s, a) for s, a in zip(start, anchor)], True
            part = Gates(gates.log_eta[..., at:end], gates.theta[..., at:end], gates.log_keep[..., at:end])
            y, start, momentum = segment(
                start, momentum, anchor, k[:, :, at:end], v[:, :, at:end], q[:, :, at:end], part
            )
            ys.append(y)
            at = end
        if state is not None:
            self._store(state.tensors, init, start, momentum, anchor if moved and self.chunk_size > 1 else None)
        return torch.cat(ys, dim=2)

    def _store(
        self, tensors: dict[str, torch.Tensor], init: Weights, start: Weights, momentum: Weights, anchor: Weights | None
    ) -> None:
        for i, w in enumerate(init):
            tensors[f"weight.{i}"].copy_(start[i] - w)
            tensors[f"momentum.{i}"].copy_(momentum[i])
            if anchor is not None:
                tensors[f"anchor.{i}"].copy_(anchor[i] - w)

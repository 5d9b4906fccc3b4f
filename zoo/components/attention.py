"""Softmax attention: MHA, GQA and MQA as one module with explicit head counts.

Self-attention is causal (decoders) or bidirectional (``causal: false``, or any layer of an
encoder stack); cross-attention to an encoder's output is its own part
(``zoo.components.cross_attention``). Options cover q/k/v/o biases, QK-norm, a sliding
window, attention sinks (gpt-oss) and a scale override (Gemma's query_pre_attn_scalar).
The state layout is declared here, so the KV-cache size the analysis reports is the one
the cache allocates.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from zoo.components import cpu_attention
from zoo.components.attention_options import AttentionOptions, MHAOptions, MQAOptions
from zoo.components.fused import QKV, project
from zoo.components.linear import Linear, step_tensors
from zoo.components.norms import RMSNorm
from zoo.components.sdpa_kernels import in_dtype, sdpa, varying_shape_kernels
from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, Positions, TokenMixer, TokenNorm
from zoo.specs.state import LayerState, StateTensor
from zoo.specs.visibility import causal_keys_seen, visible_keys


class Attention(TokenMixer):
    """Grouped-query self-attention over torch's scaled_dot_product_attention, causal or
    not; it keeps per-token K/V."""

    bidirectional: ClassVar[bool] = True

    def __init__(self, options: AttentionOptions, ctx: BuildContext) -> None:
        super().__init__()
        self.causal = options.causal and ctx.causal
        self.n_heads = options.n_heads
        self.n_kv_heads = options.kv_heads
        self.head_dim = int(options.head_dim or ctx.d_model // options.n_heads)
        self.window = options.window
        self.scale = options.scale if options.scale is not None else self.head_dim**-0.5
        d, hd = ctx.d_model, self.head_dim
        out_bias = options.bias if options.out_bias is None else options.out_bias
        self.output_gate = options.output_gate
        self.clip_qkv = options.clip_qkv
        self.q_proj = Linear(d, self.n_heads * hd * (2 if options.output_gate else 1), bias=options.bias)
        self.k_proj = Linear(d, self.n_kv_heads * hd, bias=options.bias)
        self.v_proj = Linear(d, self.n_kv_heads * hd, bias=options.bias)
        self.o_proj = Linear(self.n_heads * hd, d, bias=out_bias)
        self.q_norm = ctx.make_norm(hd) if options.qk_norm else None
        self.k_norm = ctx.make_norm(hd) if options.qk_norm else None
        self.sinks = nn.Parameter(torch.zeros(self.n_heads)) if options.sinks else None

    def reset_parameters(self) -> None:
        """Sinks start at 0 (no extra mass in the softmax); the projections initialise themselves."""
        if self.sinks is not None:
            nn.init.zeros_(self.sinks)

    def fusable_projections(self) -> dict[str, tuple[str, ...]]:
        """q, k and v read the same input (``zoo.fuse_projections``)."""
        return {"qkv_proj": QKV}

    # ---- state ----------------------------------------------------------------------------
    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        """K and V per token (a sliding window keeps a ring of at most ``window`` slots)."""
        length = min(max_len, self.window) if self.window else max_len
        shape = (batch_size, self.n_kv_heads, length, self.head_dim)
        return {"k": StateTensor(shape), "v": StateTensor(shape)}

    def score_flops(self, n_new: int, context_len: int) -> int:
        """FLOPs of q·kᵀ and probs·v (2 each per multiply-add) for n_new queries."""
        if self.causal:
            keys = causal_keys_seen(n_new, context_len, self.window)
        elif self.window is None:  # every query sees every key
            keys = n_new * context_len
        else:  # window // 2 on each side and itself, fewer at the sequence's ends
            keys = bidirectional_keys_seen(context_len, self.window // 2) * n_new // context_len
        return 4 * self.n_heads * self.head_dim * keys

    # ---- forward --------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, positions: Positions, state: LayerState | None = None) -> torch.Tensor:
        B, T, _ = x.shape
        if state is not None and T == 1 and (out := self._token_step(x, positions, state)) is not None:
            return out  # (1, 1, d): an eager step's whole attention in one C++ call
        q_out, k_out, v_out = project(self, "qkv_proj", QKV, x)  # one product when fused
        if self.clip_qkv is not None:  # MPT clamps its fused Wqkv output: the same as clamping each part
            c = self.clip_qkv
            q_out, k_out, v_out = q_out.clamp(-c, c), k_out.clamp(-c, c), v_out.clamp(-c, c)
        q, gate = self._split_query(q_out)  # (B, T, H, D), (B, T, H*D) | None
        k = k_out.view(B, T, self.n_kv_heads, self.head_dim)  # (B, T, Hkv, D)
        v = v_out.view(B, T, self.n_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, T, D)
        out = None if state is None else self._append_and_attend(q, k, v, positions, state)  # rotates too
        if out is None:
            q, k = positions.rotate(q, k)
            if state is None:
                time = torch.arange(T, device=x.device)
                out = self._attend(q, k, v, positions, time, time, positions.key_valid)
            else:
                out = self._attend_cached(q, k, v, positions, state)
        out = out.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)  # (B, T, H*D)
        return self._output(out, gate)

    def _split_query(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """q_proj's output (B, T, H*D or 2*H*D) as queries (B, T, H, D) and, with
        ``output_gate``, the gate (B, T, H*D): q_proj gives each head [query | gate], the
        checkpoint's layout."""
        B, T, _ = q.shape
        if not self.output_gate:
            return q.view(B, T, self.n_heads, self.head_dim), None
        q, gate = q.view(B, T, self.n_heads, 2 * self.head_dim).chunk(2, dim=-1)  # (B, T, H, D) each
        return q.reshape(B, T, self.n_heads, self.head_dim), gate.reshape(B, T, self.n_heads * self.head_dim)

    def _output(self, out: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
        """o_proj of the heads' output (B, T, H*D), gated by sigmoid(gate) when there is one."""
        return self.o_proj(out if gate is None else out * torch.sigmoid(gate))

    def _attend_cached(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: Positions, cache: LayerState
    ) -> torch.Tensor:
        """Write this chunk's K/V into the cache, then attend over what the cache holds."""
        time = cache.time  # (T,) cache time index of each new token
        k_cache, v_cache = cache.tensors["k"], cache.tensors["v"]  # (B, Hkv, L, D)
        length = k_cache.shape[2]
        if self.window is None or length >= cache.max_len:
            k_cache.index_copy_(2, time, in_dtype(k, k_cache.dtype))
            v_cache.index_copy_(2, time, in_dtype(v, v_cache.dtype))
            key_valid = cache.key_valid
            if cache.filled is None:  # compiled: static shapes, the whole cache, masked by time
                key_time = torch.arange(length, device=q.device)
                return self._attend(q, k_cache, v_cache, positions, time, key_time, key_valid)
            # eager: only the slots written so far (this chunk's are the last of them), a new
            # key length every call, so no kernel that builds a plan per shape
            n = cache.filled
            key_time = positions.key_times(n, q.device)  # (n,)
            key_valid = None if key_valid is None else key_valid[:, :n]
            with varying_shape_kernels(q.device):
                return self._attend(q, k_cache[:, :, :n], v_cache[:, :, :n], positions, time, key_time, key_valid, True)
        # ring buffer of `length` == window slots: slot s holds time t with t % W == s
        slots = torch.arange(length, device=q.device)
        if q.shape[2] == 1:
            # one token: writing first only evicts the key that just left the window
            k_cache.index_copy_(2, time % length, in_dtype(k, k_cache.dtype))
            v_cache.index_copy_(2, time % length, in_dtype(v, v_cache.dtype))
            newest = time[-1]
            key_time = newest - (newest - slots) % length  # (W,) time held by each slot
            return self._attend(
                q, k_cache, v_cache, positions, time, key_time, _gather_valid(cache.key_valid, key_time)
            )
        # a chunk: attend over the ring as it was plus the new keys, then keep the last W
        before = time[0] - 1
        old_time = before - (before - slots) % length  # (W,)
        keys = torch.cat((k_cache, in_dtype(k, k_cache.dtype)), dim=2)  # (B, Hkv, W+T, D)
        values = torch.cat((v_cache, in_dtype(v, v_cache.dtype)), dim=2)
        key_time = torch.cat((old_time, time))
        out = self._attend(q, keys, values, positions, time, key_time, _gather_valid(cache.key_valid, key_time))
        keep = time[-length:]
        k_cache.index_copy_(2, keep % length, in_dtype(k[:, :, -length:], k_cache.dtype))
        v_cache.index_copy_(2, keep % length, in_dtype(v[:, :, -length:], v_cache.dtype))
        return out

    def _append_and_attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: Positions, cache: LayerState
    ) -> torch.Tensor | None:
        """An eager step's one new token (q, k not yet rotated) in one C++ call where that
        computes this layer's attention (no sinks, window or padding; a position bias as the
        step's memoized mask): rotated (``Rotation.half_split``), its K/V written to the last
        filled slot, attended (``cpu_attention.append_and_attend``); else None."""
        filled, (k_cache, v_cache) = cache.filled, (cache.tensors["k"], cache.tensors["v"])  # (B, Hkv, L, D) each
        if filled is None or cache.key_valid is not None or q.shape[2] != 1:
            return None
        if self.sinks is not None or self.window is not None:
            return None
        rotation = positions.rotation
        tables = None if rotation is None else rotation.half_split(q.dtype)
        mask = self._queries_last_mask(positions, cache.time, filled, q.dtype)
        options: dict[str, Any] = {"scale": self.scale} if mask is None else {"attn_mask": mask, "scale": self.scale}
        write = cpu_attention.CacheWrite(k, v, k_cache, v_cache, filled, tables)
        if not cpu_attention.appends(q, write, options):
            return None
        if rotation is not None and tables is None:  # a rotation the kernel does not know: applied first
            q, write.k = positions.rotate(q, k)
        return cpu_attention.append_and_attend(q, write, options)  # (B, H, 1, D)

    def residual_token(
        self, x: torch.Tensor, norm: TokenNorm, positions: Positions, state: LayerState
    ) -> torch.Tensor | None:
        """x + this attention of norm(x) for one cached token in one C++ call (``_token_step``)."""
        return self._token_step(x, positions, state, norm) if x.shape[1] == 1 and x.is_cpu else None

    def _token_step(
        self, x: torch.Tensor, positions: Positions, cache: LayerState, norm: TokenNorm | None = None
    ) -> torch.Tensor | None:
        """An eager step's one token (1, 1, d) -> (1, 1, d) through ``cpu_attention.attention_token``
        (the q|k|v product, q and k's norms, the cache write, rotation and attention and the
        output product in one C++ call, the same kernels in the same order) where that computes
        this layer: q, k and v fused, projections whose layers give their tensors
        (``RowStackable.step_tensors``: float rows on the row kernel, int8 rows), RMS q/k norms or
        none, no output gate, clipping, sinks, window or padding; else None. With ``norm`` (a
        pre-norm block's): x + the attention of norm(x)."""
        if cache.filled is None or cache.key_valid is not None:
            return None
        if self.output_gate or self.clip_qkv is not None or self.sinks is not None or self.window is not None:
            return None
        # the submodules and their tensors read from nn.Module's dicts: through its __getattr__
        # each read cost ~1 µs here (2-core Xeon), ten a layer, a third of this function's time
        modules = self._modules
        # qkv_proj: q, k and v fused (zoo.fuse_projections); None: a product of the layer's own
        projections = step_tensors(modules.get("qkv_proj"), modules["o_proj"])
        if projections is None:
            return None
        qkv_tensors, o_tensors = projections
        norms = self._token_norms(modules.get("q_norm"), modules.get("k_norm"))
        if norms is False:
            return None
        rotation = positions.rotation
        tables = None if rotation is None else rotation.half_split(x.dtype)
        if rotation is not None and tables is None:  # a rotation the kernel does not know
            return None
        mask = self._queries_last_mask(positions, cache.time, cache.filled, x.dtype)
        options: dict[str, Any] = {"scale": self.scale} if mask is None else {"attn_mask": mask, "scale": self.scale}
        k_cache, v_cache = cache.tensors["k"], cache.tensors["v"]  # (1, Hkv, L, D) each
        step = cpu_attention.TokenStep(qkv_tensors, norms, k_cache, v_cache, cache.filled, tables, o_tensors)
        return cpu_attention.attention_token(x, step, options, norm)  # (1, 1, d), or None: declined

    @staticmethod
    def _token_norms(
        q_norm: nn.Module | None, k_norm: nn.Module | None
    ) -> tuple[torch.Tensor, torch.Tensor, float, bool] | None | bool:
        """q and k's norms as ``cpu_attention.TokenStep`` takes them: None without, (weights,
        eps, unit offset) for two alike RMS norms, False for others (the kernel has no other)."""
        if q_norm is None and k_norm is None:
            return None
        if type(q_norm) is not RMSNorm or type(k_norm) is not RMSNorm:
            return False
        if q_norm.eps != k_norm.eps or q_norm.unit_offset != k_norm.unit_offset:
            return False
        return q_norm._parameters["weight"], k_norm._parameters["weight"], q_norm.eps, q_norm.unit_offset

    def _queries_last_mask(
        self, positions: Positions, query_time: torch.Tensor, keys: int, dtype: torch.dtype
    ) -> torch.Tensor | None:
        """The biased mask (B|1, H, T, S) of queries ``query_time`` (the last T of keys 0..S-1), or
        None without a score bias: of the sizes alone, so a forward's layers share one (memo)."""
        T = query_time.shape[0]
        key = ("queries_last", id(positions.positional), self.n_heads, self.causal, T, keys, dtype)
        key_time = lambda: positions.key_times(keys, query_time.device)  # (S,)
        return positions.memo(key, lambda: self._biased_mask(positions, query_time, key_time(), dtype))

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        positions: Positions,
        query_time: torch.Tensor,
        key_time: torch.Tensor,
        key_valid: torch.Tensor | None,
        queries_last: bool = False,
    ) -> torch.Tensor:
        """Softmax attention of q (B, H, T, D) over k, v (B, Hkv, S, D) -> (B, H, T, D).

        ``queries_last``: the keys are times 0..S-1 and the queries the last T of them, so
        plain causal attention needs no mask: none for one query, ``is_causal`` for S == T.
        """
        k, v = in_dtype(k, q.dtype), in_dtype(v, q.dtype)
        T, S = q.shape[2], k.shape[2]
        bias = None
        if queries_last and self.sinks is None and key_valid is None and self.window is None:
            biased = self._queries_last_mask(positions, query_time, S, q.dtype)
            if biased is not None:
                return sdpa(q, k, v, attn_mask=biased, scale=self.scale, enable_gqa=self.n_kv_heads != self.n_heads)
        else:
            bias = self._score_bias(positions, query_time, key_time)
        plain = self.sinks is None and bias is None and key_valid is None and self.window is None
        if plain and not self.causal:
            return sdpa(q, k, v, scale=self.scale, enable_gqa=self.n_kv_heads != self.n_heads)
        if plain and (queries_last or query_time is key_time) and (T == 1 or T == S):
            return sdpa(q, k, v, is_causal=T > 1, scale=self.scale, enable_gqa=self.n_kv_heads != self.n_heads)
        mask = visible_keys(query_time, key_time, self.window, key_valid, self.causal)  # (B|1, 1, T, S)
        if self.sinks is None:
            attn_mask: torch.Tensor = mask
            if bias is not None:
                attn_mask = bias.to(q.dtype).masked_fill(~mask, float("-inf"))
            return sdpa(q, k, v, attn_mask=attn_mask, scale=self.scale, enable_gqa=self.n_kv_heads != self.n_heads)
        return self._attend_with_sinks(q, k, v, mask, bias)

    def _score_bias(
        self, positions: Positions, query_time: torch.Tensor, key_time: torch.Tensor
    ) -> torch.Tensor | None:
        """The positional encoding's score bias (B|1, H, T, S), or None."""
        keys = key_time.expand(1, -1) if key_time.dim() == 1 else key_time  # (B|1, S)
        return positions.positional.score_bias(query_time[None], keys, self.n_heads)

    def _biased_mask(
        self, positions: Positions, query_time: torch.Tensor, key_time: torch.Tensor, dtype: torch.dtype
    ) -> torch.Tensor | None:
        """The score bias with -inf at hidden keys (B|1, H, T, S) in ``dtype``; None without a bias.
        The queries are the last T keys: one, without a window, hides none (a T5 step's mask ops)."""
        if query_time.shape[0] == 1 and self.window is None:  # laid out once for every layer
            return positions.positional.last_query_bias(key_time, self.n_heads, dtype)
        bias = self._score_bias(positions, query_time, key_time)
        if bias is None:
            return None
        mask = visible_keys(query_time, key_time, self.window, None, self.causal)  # (B|1, 1, T, S)
        return bias.to(dtype).masked_fill(~mask, float("-inf"))

    def _attend_with_sinks(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        """Softmax with one extra learned logit per head, dropped after normalising."""
        assert self.sinks is not None
        group = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(group, dim=1)  # (B, H, S, D)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale  # (B, H, T, S)
        if bias is not None:
            scores = scores + bias.to(scores.dtype)
        scores = scores.masked_fill(~mask, float("-inf"))
        sinks = self.sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)  # (B, H, T, 1)
        logits = torch.cat((scores, sinks), dim=-1)  # (B, H, T, S+1)
        logits = logits - logits.amax(dim=-1, keepdim=True)
        probs = F.softmax(logits, dim=-1, dtype=logits.dtype)[..., :-1]  # (B, H, T, S)
        return torch.matmul(probs.to(v.dtype), v)  # (B, H, T, D)

    def extra_repr(self) -> str:
        return (
            f"heads={self.n_heads}, kv_heads={self.n_kv_heads}, head_dim={self.head_dim}, window={self.window}, "
            f"causal={self.causal}"
        )


def bidirectional_keys_seen(length: int, half: int) -> int:
    """Keys attended in total by the ``length`` queries of a sequence when query q sees keys
    max(0, q - half) .. min(length - 1, q + half): the sum, in closed form."""
    inner = max(0, length - half)  # queries whose right edge stays inside: q + half <= length - 1
    right = inner * (inner - 1) // 2 + inner * half + (length - inner) * (length - 1)  # sum of right edges
    over = max(0, length - 1 - half)  # queries q > half: their left edge is q - half
    left = over * (over + 1) // 2  # sum of left edges
    return right - left + length


def _gather_valid(key_valid: torch.Tensor | None, key_time: torch.Tensor) -> torch.Tensor | None:
    """Validity (B, S) of keys at the given times; empty slots (time < 0) are masked anyway."""
    if key_valid is None:
        return None
    return key_valid[:, key_time.clamp(min=0)]  # (B, S)


def build_attention(options: AttentionOptions, ctx: BuildContext) -> Attention:
    """Softmax attention with explicit query and key/value head counts."""
    return Attention(options, ctx)


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register("attention", "gqa", build_attention, options=AttentionOptions, module=Attention)
    register("attention", "mha", build_attention, options=MHAOptions, module=Attention)
    register("attention", "mqa", build_attention, options=MQAOptions, module=Attention)

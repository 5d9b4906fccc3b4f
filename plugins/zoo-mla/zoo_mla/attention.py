"""Multi-head latent attention (DeepSeek-V2/V3): the KV cache holds a compressed latent.

Keys and values of all heads are up-projected from one ``kv_lora_rank`` latent per token,
plus one ``qk_rope_head_dim`` rotary key shared by all heads. The cache keeps exactly those
two (after the latent's norm, the rope key after rotation), so a token costs
``kv_lora_rank + qk_rope_head_dim`` values per layer instead of ``2 * heads * head_dim``.

Two equivalent ways to attend, as DeepSeek runs them:
- expanded (no cache, and cached chunks of several tokens): up-project the latents to
  per-head K and V and run ordinary attention (cheapest when queries are many);
- absorbed (one-token decode): fold the key up-projection into the query and the value
  up-projection into the output, and attend over the latents directly, without ever
  materialising per-head K/V for the whole context.
Module and parameter names follow transformers' DeepseekV2Attention, so checkpoints map 1:1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt
from torch import nn

from zoo.parts import (
    BuildContext,
    LayerState,
    Options,
    Positions,
    StateTensor,
    TokenMixer,
    causal_keys_seen,
    visible_keys,
)


class MLAOptions(Options):
    tiny: ClassVar[Mapping[str, Any]] = {
        "n_heads": 4,
        "q_lora_rank": 16,
        "kv_lora_rank": 16,
        "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 8,
        "v_head_dim": 8,
    }

    n_heads: PositiveInt
    q_lora_rank: PositiveInt | None = Field(
        None, description="low-rank query compression; null: a full q_proj (V2-Lite)"
    )
    kv_lora_rank: PositiveInt = Field(512, description="width of the cached latent")
    qk_nope_head_dim: PositiveInt = Field(128, description="per-head query/key channels without position")
    qk_rope_head_dim: PositiveInt = Field(64, description="rotary channels; the rope key is shared by all heads")
    v_head_dim: PositiveInt = 128
    bias: bool = Field(False, description="biases on q_a_proj, kv_a_proj_with_mqa and o_proj (attention_bias)")
    scale: float | None = Field(
        None, gt=0, description="score scale; default qk_head_dim ** -0.5, times YaRN's mscale(mscale_all_dim)**2"
    )

    @property
    def head_dim(self) -> int:
        """Query/key width per head (what positional encodings and analysis read)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def rope_head_dim(self) -> int:
        """Only these trailing channels of each query and of the shared key are rotated."""
        return self.qk_rope_head_dim


def yarn_mscale(factor: float, mscale: float) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def softmax_scale(options: MLAOptions, ctx: BuildContext) -> float:
    """DeepSeek multiplies the score scale by YaRN's mscale squared when the rope is scaled.

    The number lives in the layer's positional spec (``scaling.mscale_all_dim``), so it is
    read from there rather than repeated in the attention options.
    """
    if options.scale is not None:
        return options.scale
    scale = options.head_dim**-0.5
    scaling = getattr(ctx.layer.positional.options, "scaling", None)
    mscale_all_dim = getattr(scaling, "mscale_all_dim", None)
    if scaling is not None and getattr(scaling, "type", None) == "yarn" and mscale_all_dim:
        m = yarn_mscale(scaling.factor, mscale_all_dim)
        scale *= m * m
    return scale


class MultiHeadLatentAttention(TokenMixer):
    """Causal MLA; caches the normed latent (B, L, r) and the rotated rope key (B, L, dr)."""

    def __init__(self, options: MLAOptions, ctx: BuildContext) -> None:
        super().__init__()
        d = ctx.d_model
        self.n_heads = H = options.n_heads
        self.nope_dim, self.rope_dim = options.qk_nope_head_dim, options.qk_rope_head_dim
        self.v_dim, self.rank = options.v_head_dim, options.kv_lora_rank
        qk = self.nope_dim + self.rope_dim
        self.scale = softmax_scale(options, ctx)
        if options.q_lora_rank is None:
            self.q_proj = nn.Linear(d, H * qk, bias=False)
        else:
            self.q_a_proj = nn.Linear(d, options.q_lora_rank, bias=options.bias)
            self.q_a_layernorm = ctx.make_norm(options.q_lora_rank)
            self.q_b_proj = nn.Linear(options.q_lora_rank, H * qk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(d, self.rank + self.rope_dim, bias=options.bias)
        self.kv_a_layernorm = ctx.make_norm(self.rank)
        self.kv_b_proj = nn.Linear(self.rank, H * (self.nope_dim + self.v_dim), bias=False)
        self.o_proj = nn.Linear(H * self.v_dim, d, bias=options.bias)

    # ---- cache ----------------------------------------------------------------------------
    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        """The latent and the shared rope key: all that is needed to recompute K and V."""
        return {
            "latent": StateTensor((batch_size, max_len, self.rank)),
            "k_rope": StateTensor((batch_size, max_len, self.rope_dim)),
        }

    def score_flops(self, n_new: int, context_len: int) -> int:
        """q·kᵀ over nope+rope channels and probs·v, per head, for n_new causal queries
        (the expanded form; the absorbed decode does the same multiply-adds in latent space)."""
        keys = causal_keys_seen(n_new, context_len, None)
        return 2 * self.n_heads * (self.nope_dim + self.rope_dim + self.v_dim) * keys

    # ---- forward --------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, positions: Positions, state: LayerState | None = None) -> torch.Tensor:
        cache = state
        B, T, _ = x.shape
        q = self.q_proj(x) if hasattr(self, "q_proj") else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(B, T, self.n_heads, self.nope_dim + self.rope_dim).transpose(1, 2)  # (B, H, T, dn+dr)
        q_nope, q_rope = q.split([self.nope_dim, self.rope_dim], dim=-1)
        latent, k_rope = self.kv_a_proj_with_mqa(x).split([self.rank, self.rope_dim], dim=-1)  # (B, T, r), (B, T, dr)
        latent = self.kv_a_layernorm(latent)
        q_rope, k_rope = positions.rotate(q_rope, k_rope[:, None])  # (B, H, T, dr), (B, 1, T, dr)
        if cache is None:
            time = torch.arange(T, device=x.device)
            out = self._attend_expanded(q_nope, q_rope, latent, k_rope, positions, time, time, positions.key_valid)
        else:
            out = self._attend_cached(q_nope, q_rope, latent, k_rope[:, 0], positions, cache)
        out = out.transpose(1, 2).reshape(B, T, self.n_heads * self.v_dim)  # (B, T, H*dv)
        return self.o_proj(out)

    def _attend_cached(
        self,
        q_nope: torch.Tensor,
        q_rope: torch.Tensor,
        latent: torch.Tensor,
        k_rope: torch.Tensor,
        positions: Positions,
        cache: LayerState,
    ) -> torch.Tensor:
        """Write this chunk's latent and rope key, then attend over everything cached."""
        time = cache.time  # (T,)
        latent_cache, rope_cache = cache.tensors["latent"], cache.tensors["k_rope"]  # (B, L, r), (B, L, dr)
        latent_cache.index_copy_(1, time, latent.to(latent_cache.dtype))
        rope_cache.index_copy_(1, time, k_rope.to(rope_cache.dtype))
        if q_nope.shape[2] == 1:  # decode: static shapes, every slot (empty ones masked by time)
            key_time = torch.arange(latent_cache.shape[1], device=time.device)  # (L,)
            return self._attend_absorbed(
                q_nope,
                q_rope,
                latent_cache.to(q_nope.dtype),
                rope_cache.to(q_nope.dtype)[:, None],
                positions,
                time,
                key_time,
                cache.key_valid,
            )
        # a chunk (prefill): up-project only the slots written so far, not the whole cache
        end = int(time.max()) + 1
        key_time = torch.arange(end, device=time.device)  # (S,)
        key_valid = None if cache.key_valid is None else cache.key_valid[:, :end]
        return self._attend_expanded(
            q_nope,
            q_rope,
            latent_cache[:, :end].to(q_nope.dtype),
            rope_cache[:, None, :end].to(q_nope.dtype),
            positions,
            time,
            key_time,
            key_valid,
        )

    def _mask(
        self,
        positions: Positions,
        query_time: torch.Tensor,
        key_time: torch.Tensor,
        key_valid: torch.Tensor | None,
        dtype: torch.dtype,
    ) -> torch.Tensor:
        """Additive mask (B|1, H|1, T, S): causal, padding, and any positional score bias."""
        allowed = visible_keys(query_time, key_time, None, key_valid)  # (B|1, 1, T, S)
        bias = positions.positional.score_bias(query_time[None], key_time[None], self.n_heads)
        base = torch.zeros((), dtype=dtype, device=query_time.device) if bias is None else bias.to(dtype)
        return base.masked_fill(~allowed, float("-inf"))

    def _attend_expanded(
        self,
        q_nope: torch.Tensor,
        q_rope: torch.Tensor,
        latent: torch.Tensor,
        k_rope: torch.Tensor,
        positions: Positions,
        query_time: torch.Tensor,
        key_time: torch.Tensor,
        key_valid: torch.Tensor | None,
    ) -> torch.Tensor:
        """Up-project latents (B, S, r) to per-head K, V and attend -> (B, H, T, dv)."""
        B, S, _ = latent.shape
        kv = (
            self.kv_b_proj(latent).view(B, S, self.n_heads, self.nope_dim + self.v_dim).transpose(1, 2)
        )  # (B, H, S, dn+dv)
        k_nope, v = kv.split([self.nope_dim, self.v_dim], dim=-1)
        k = torch.cat((k_nope, k_rope.expand(-1, self.n_heads, -1, -1)), dim=-1)  # (B, H, S, dn+dr)
        q = torch.cat((q_nope, q_rope), dim=-1)  # (B, H, T, dn+dr)
        plain = key_valid is None and query_time is key_time and q.shape[2] > 1
        if plain and positions.positional.score_bias(query_time[None], key_time[None], self.n_heads) is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        mask = self._mask(positions, query_time, key_time, key_valid, q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)

    def _attend_absorbed(
        self,
        q_nope: torch.Tensor,
        q_rope: torch.Tensor,
        latent: torch.Tensor,
        k_rope: torch.Tensor,
        positions: Positions,
        query_time: torch.Tensor,
        key_time: torch.Tensor,
        key_valid: torch.Tensor | None,
    ) -> torch.Tensor:
        """Attend over latents directly: q·W_uk·c + q_rope·k_rope, then (p·c)·W_uv -> (B, H, T, dv)."""
        w = self.kv_b_proj.weight.view(self.n_heads, self.nope_dim + self.v_dim, self.rank)  # (H, dn+dv, r)
        w_uk, w_uv = w[:, : self.nope_dim], w[:, self.nope_dim :]  # (H, dn, r), (H, dv, r)
        q_latent = torch.einsum("bhtn,hnr->bhtr", q_nope, w_uk.to(q_nope.dtype))  # (B, H, T, r)
        scores = torch.matmul(q_latent, latent[:, None].transpose(-1, -2))  # (B, H, T, S)
        scores = scores + torch.matmul(q_rope, k_rope.transpose(-1, -2))  # (B, H, T, S)
        scores = scores.float() * self.scale + self._mask(positions, query_time, key_time, key_valid, torch.float32)
        probs = F.softmax(scores, dim=-1).to(latent.dtype)  # (B, H, T, S)
        out_latent = torch.matmul(probs, latent[:, None])  # (B, H, T, r)
        return torch.einsum("bhtr,hvr->bhtv", out_latent, w_uv.to(out_latent.dtype))  # (B, H, T, dv)

    def extra_repr(self) -> str:
        return (
            f"heads={self.n_heads}, kv_lora_rank={self.rank}, nope={self.nope_dim}, rope={self.rope_dim}, "
            f"v={self.v_dim}, scale={self.scale:.6g}"
        )


def build_mla(options: MLAOptions, ctx: BuildContext) -> MultiHeadLatentAttention:
    """DeepSeek multi-head latent attention (the cache keeps a latent and one rope key)."""
    return MultiHeadLatentAttention(options, ctx)

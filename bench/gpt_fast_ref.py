"""A hand-written gpt-fast-style Llama decode loop: the reference the GPU table holds zoo to.

Written the way gpt-fast (pytorch-labs/gpt-fast, ``model.py`` / ``generate.py``) writes it:
one fused q|k|v projection, a static K/V cache written in place at ``input_pos``, RoPE from a
precomputed table, SDPA with a boolean mask sliced from a preallocated causal mask, and a
decode step compiled whole with ``mode="reduce-overhead"`` (CUDA graphs). Nothing of zoo is
imported: if zoo's decode of the same shapes is slower than this, the gap is zoo's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Shape:
    vocab: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden: int
    rope_base: float = 500000.0


class Block(nn.Module):
    def __init__(self, s: Shape, batch: int, max_len: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.s = s
        self.wqkv = nn.Linear(s.dim, (s.n_heads + 2 * s.n_kv_heads) * s.head_dim, bias=False)
        self.wo = nn.Linear(s.n_heads * s.head_dim, s.dim, bias=False)
        self.w13 = nn.Linear(s.dim, 2 * s.hidden, bias=False)
        self.w2 = nn.Linear(s.hidden, s.dim, bias=False)
        self.attn_norm = nn.RMSNorm(s.dim, eps=1e-5)
        self.ffn_norm = nn.RMSNorm(s.dim, eps=1e-5)
        shape = (batch, s.n_kv_heads, max_len, s.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype), persistent=False)  # (B, Hkv, L, D)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype), persistent=False)  # (B, Hkv, L, D)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, input_pos: torch.Tensor
    ) -> torch.Tensor:
        s, (B, T, _) = self.s, x.shape
        q, k, v = self.wqkv(self.attn_norm(x)).split(
            [s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim, s.n_kv_heads * s.head_dim], dim=-1
        )
        q = _rope(q.view(B, T, s.n_heads, s.head_dim), cos, sin).transpose(1, 2)  # (B, H, T, D)
        k = _rope(k.view(B, T, s.n_kv_heads, s.head_dim), cos, sin).transpose(1, 2)  # (B, Hkv, T, D)
        v = v.view(B, T, s.n_kv_heads, s.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        self.k_cache.index_copy_(2, input_pos, k)
        self.v_cache.index_copy_(2, input_pos, v)
        y = F.scaled_dot_product_attention(
            q, self.k_cache, self.v_cache, attn_mask=mask, enable_gqa=s.n_heads != s.n_kv_heads
        )  # (B, H, T, D)
        x = x + self.wo(y.transpose(1, 2).reshape(B, T, s.n_heads * s.head_dim))
        gate, up = self.w13(self.ffn_norm(x)).chunk(2, dim=-1)  # (B, T, F) each
        return x + self.w2(F.silu(gate) * up)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate halves (the Hugging Face Llama layout); cos, sin: (T, D/2)."""
    a, b = x.float().chunk(2, dim=-1)  # (B, T, H, D/2) each
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1).type_as(x)


class Transformer(nn.Module):
    def __init__(self, s: Shape, batch: int, max_len: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.embed = nn.Embedding(s.vocab, s.dim)
        self.layers = nn.ModuleList(Block(s, batch, max_len, dtype) for _ in range(s.n_layers))
        self.norm = nn.RMSNorm(s.dim, eps=1e-5)
        self.output = nn.Linear(s.dim, s.vocab, bias=False)
        inv = 1.0 / (s.rope_base ** (torch.arange(0, s.head_dim, 2).float() / s.head_dim))  # (D/2,)
        angles = torch.outer(torch.arange(max_len).float(), inv)  # (L, D/2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        causal = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))  # (L, L)
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, idx: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        mask = self.causal[None, None, input_pos]  # (1, 1, T, L)
        cos, sin = self.cos[input_pos], self.sin[input_pos]  # (T, D/2)
        x = self.embed(idx)  # (B, T, dim)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, input_pos)
        return self.output(self.norm(x))  # (B, T, vocab)


def decode_tokens_per_s(
    s: Shape,
    *,
    batch: int,
    prompt_len: int,
    gen_len: int,
    device: torch.device,
    dtype: torch.dtype,
    compile: bool,
    repeats: int = 3,
) -> dict[str, float]:
    """Greedy decode of ``gen_len`` tokens after a ``prompt_len`` prefill: median tokens/s of the
    decode steps over ``repeats`` rounds (after one warm-up round, which also compiles)."""
    max_len = prompt_len + gen_len
    with torch.device(device):
        model = Transformer(s, batch, max_len, dtype).to(dtype).eval()
    step = torch.compile(model, mode="reduce-overhead", fullgraph=True) if compile else model
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    prompt = torch.randint(0, s.vocab, (batch, prompt_len), device=device)
    rates, compile_s = [], 0.0
    with torch.inference_mode():
        for round_ in range(1 + repeats):
            start = time.perf_counter()
            token = model(prompt, torch.arange(prompt_len, device=device))[:, -1:].argmax(-1)  # (B, 1)
            sync()
            begin = time.perf_counter()
            for i in range(gen_len - 1):
                pos = torch.tensor([prompt_len + i], device=device)
                token = step(token, pos)[:, -1:].argmax(-1)  # (B, 1)
            sync()
            if round_ == 0:
                compile_s = time.perf_counter() - start
            else:
                rates.append(batch * (gen_len - 1) / (time.perf_counter() - begin))
    rates.sort()
    return {"decode_tokens_per_s": rates[len(rates) // 2], "compile_s": compile_s if compile else 0.0}

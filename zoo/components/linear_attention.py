"""Linear attention (Katharopoulos et al. 2020, arXiv 2006.16236): the `attention` kind ``linear``.

Softmax(q·kᵀ) is replaced by a kernel φ(q)·φ(k)ᵀ with φ = elu + 1 (positive), so causal
attention becomes a running sum: S_t = Σ_{s≤t} φ(k_s) v_sᵀ (D_k × D_v per head) and
z_t = Σ_{s≤t} φ(k_s), and y_t = φ(q_t)·S_t / (φ(q_t)·z_t + eps). The state is fixed per
sequence whatever the context (``per="sequence"``, float32): ``kv`` (B, H, D_k, D_v) and
``k_sum`` (B, H, D_k).

A prefill is chunk-wise: inside a chunk of ``CHUNK`` tokens the causal part is a masked
(L × L) product, the part before it is φ(q)·S of the state entering the chunk; one Python
iteration per chunk, not per token. RoPE, when the layer's positional encoding is RoPE,
rotates q and k before φ.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt, ValidationInfo, model_validator

from zoo.components.linear import Linear
from zoo.errors import SpecError
from zoo.hookspecs import hookimpl
from zoo.interfaces import BuildContext, LayerState, Memory, Options, Positions, StateTensor, TokenMixer

CHUNK = 64
EPS = 1e-6


class LinearAttentionOptions(Options):
    n_heads: PositiveInt
    head_dim: PositiveInt | None = Field(None, description="default d_model // n_heads")
    bias: bool = Field(False, description="bias on the q, k, v and output projections")

    @model_validator(mode="before")
    @classmethod
    def _fill_head_dim(cls, data: Any, info: ValidationInfo) -> Any:
        d_model = (info.context or {}).get("d_model")
        n_heads = data.get("n_heads") if isinstance(data, dict) else None
        if isinstance(data, dict) and data.get("head_dim") is None and isinstance(n_heads, int) and n_heads > 0 and isinstance(d_model, int):
            if d_model % n_heads:
                raise ValueError(f"head_dim: not given and d_model={d_model} is not divisible by n_heads={n_heads}")
            data = {**data, "head_dim": d_model // n_heads}
        return data


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = elu(x) + 1: positive, so the normaliser φ(q)·z never changes sign."""
    return F.elu(x) + 1.0


class LinearAttention(TokenMixer):
    """Causal linear attention with a running key-value state per head."""

    causal = True

    def __init__(self, options: LinearAttentionOptions, ctx: BuildContext) -> None:
        super().__init__()
        self.n_heads = options.n_heads
        self.head_dim = int(options.head_dim or ctx.d_model // options.n_heads)
        inner = self.n_heads * self.head_dim
        self.q_proj = Linear(ctx.d_model, inner, bias=options.bias)
        self.k_proj = Linear(ctx.d_model, inner, bias=options.bias)
        self.v_proj = Linear(ctx.d_model, inner, bias=options.bias)
        self.o_proj = Linear(inner, ctx.d_model, bias=options.bias)

    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        H, D = self.n_heads, self.head_dim
        return {
            "kv": StateTensor((batch_size, H, D, D), torch.float32, per="sequence"),
            "k_sum": StateTensor((batch_size, H, D), torch.float32, per="sequence"),
        }

    def score_flops(self, n_new: int, context_len: int) -> int:
        """Per token and head: the state update φ(k)vᵀ and the read φ(q)·S (2·D² each),
        the normaliser's update and read (2·D each); no term grows with the context."""
        return n_new * self.n_heads * (4 * self.head_dim * self.head_dim + 4 * self.head_dim)

    def forward(
        self, x: torch.Tensor, positions: Positions | None = None, state: LayerState | None = None, memory: Memory | None = None
    ) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d); with a state, ``kv`` and ``k_sum`` are read and updated in
        place. Tokens marked False in ``token_valid`` (left padding) add nothing to them."""
        B, T, _ = x.shape
        H, D = self.n_heads, self.head_dim
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, H, D).transpose(1, 2)
        v = self.v_proj(x).view(B, T, H, D).transpose(1, 2)
        if positions is not None:
            q, k = positions.rotate(q, k)
        q, k, v = feature_map(q.float()), feature_map(k.float()), v.float()
        valid = state.token_valid if state is not None else (None if positions is None else positions.key_valid)
        if valid is not None:
            k = k * valid[:, None, :, None].to(k.dtype)  # (B, H, T, D): padding keys add nothing
        if state is None:
            kv = torch.zeros(B, H, D, D, device=x.device)
            k_sum = torch.zeros(B, H, D, device=x.device)
        else:
            kv, k_sum = state.tensors["kv"], state.tensors["k_sum"]
        outputs = []
        for start in range(0, T, CHUNK):
            stop = min(start + CHUNK, T)
            y, kv, k_sum = _chunk(q[:, :, start:stop], k[:, :, start:stop], v[:, :, start:stop], kv, k_sum)
            outputs.append(y)
        if state is not None:
            state.tensors["kv"].copy_(kv)
            state.tensors["k_sum"].copy_(k_sum)
        y = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2)  # (B, H, T, D)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, H * D).to(x.dtype))

    def extra_repr(self) -> str:
        return f"heads={self.n_heads}, head_dim={self.head_dim}, feature_map=elu+1"


def _chunk(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv: torch.Tensor, k_sum: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One chunk: φ(q), φ(k), v (B, H, L, D) against the state entering it; returns the
    outputs (B, H, L, D) and the state after it."""
    L = q.shape[2]
    scores = torch.matmul(q, k.transpose(-1, -2))  # (B, H, L, L)
    if L > 1:
        causal = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, 0.0)
    numerator = torch.matmul(scores, v) + torch.matmul(q, kv)  # (B, H, L, D)
    denominator = scores.sum(-1) + torch.matmul(q, k_sum[..., None]).squeeze(-1)  # (B, H, L)
    y = numerator / (denominator[..., None] + EPS)
    kv = kv + torch.matmul(k.transpose(-1, -2), v)  # (B, H, D, D)
    k_sum = k_sum + k.sum(dim=2)  # (B, H, D)
    return y, kv, k_sum


def build_linear_attention(options: LinearAttentionOptions, ctx: BuildContext) -> LinearAttention:
    """Causal linear attention (elu + 1 feature map, running key-value state)."""
    if ctx.role == "cross_attention":
        raise SpecError("cross_attention.kind: linear is a causal self-attention with a running state; "
                        "allowed: gqa, mha, mqa")
    return LinearAttention(options, ctx)


@hookimpl
def zoo_register_components(register):  # type: ignore[no-untyped-def]
    register("attention", "linear", build_linear_attention, options=LinearAttentionOptions, module=LinearAttention)

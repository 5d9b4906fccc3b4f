"""DeBERTa's disentangled self-attention (He et al., 2021): scores are content-to-content
plus content-to-position (c2p) plus position-to-content (p2c) terms.

For query i and key j with bucketed distance r = bucket(pos_i - pos_j) and the stack's
relative table E (``disentangled`` positional, 2 * span rows), each layer projects E into
position keys Kr and queries Qr (with its own key/query projections when
``share_att_key``, else with ``pos_key_proj`` / ``pos_query_proj``) and scores

    (q_i . k_j  +  q_i . Kr[clamp(r + span)]  +  k_j . Qr[clamp(-r(j, i) + span)]) / sqrt(D * f)

where f = 1 + the number of position terms (``pos_att_type``: c2p, p2c). Bidirectional
(an encoder); it keeps no state between calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt, ValidationInfo, model_validator

from zoo.components.disentangled_position import DisentangledPositions
from zoo.components.linear import Linear
from zoo.errors import GenerationError, SpecError
from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, Positions, TokenMixer
from zoo.specs.options import Options
from zoo.specs.state import LayerState, StateTensor
from zoo.specs.visibility import visible_keys

PositionTerm = Literal["c2p", "p2c"]


class DisentangledAttentionOptions(Options):
    n_heads: PositiveInt
    head_dim: PositiveInt | None = Field(None, description="default d_model // n_heads")
    bias: bool = Field(True, description="bias on the q, k, v, output and position projections")
    pos_att_type: tuple[PositionTerm, ...] = Field(("p2c", "c2p"), description="position terms (DeBERTa: p2c|c2p)")
    share_att_key: bool = Field(True, description="position keys/queries use the content key/query projections (v3)")

    @model_validator(mode="before")
    @classmethod
    def _fill_head_dim(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and data.get("head_dim") is None:
            d_model, heads = (info.context or {}).get("d_model"), data.get("n_heads")
            if isinstance(d_model, int) and isinstance(heads, int) and heads > 0 and d_model % heads == 0:
                data = {**data, "head_dim": d_model // heads}
        return data


class DisentangledAttention(TokenMixer):
    """Bidirectional multi-head attention with DeBERTa's relative c2p / p2c terms."""

    causal = False
    bidirectional = True

    def __init__(self, options: DisentangledAttentionOptions, ctx: BuildContext, table_rows: int) -> None:
        super().__init__()
        self.table_rows = table_rows  # the stack's relative table: 2 * span rows (for score_flops)
        self.n_heads = options.n_heads
        self.head_dim = int(options.head_dim or ctx.d_model // options.n_heads)
        self.terms = tuple(options.pos_att_type)
        self.scale = (self.head_dim * (1 + len(set(self.terms)))) ** -0.5
        d, inner = ctx.d_model, self.n_heads * self.head_dim
        self.q_proj = Linear(d, inner, bias=options.bias)
        self.k_proj = Linear(d, inner, bias=options.bias)
        self.v_proj = Linear(d, inner, bias=options.bias)
        self.o_proj = Linear(inner, d, bias=options.bias)
        separate = not options.share_att_key
        self.pos_key_proj = Linear(d, inner, bias=options.bias) if separate and "c2p" in self.terms else None
        self.pos_query_proj = Linear(d, inner, bias=options.bias) if separate and "p2c" in self.terms else None

    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        """Nothing: an encoder's attention runs over the whole input in one call."""
        return {}

    def score_flops(self, n_new: int, context_len: int) -> int:
        """q.k and probs.v, plus each position term: every query (c2p) or key (p2c) against
        all 2 * span table rows, and the table's projection (once per call)."""
        flops = 4 * self.n_heads * self.head_dim * n_new * context_len
        rows, d = self.table_rows, self.q_proj.in_features
        for term in set(self.terms):
            per = n_new if term == "c2p" else context_len
            flops += 2 * self.n_heads * self.head_dim * rows * per + 2 * rows * d * self.n_heads * self.head_dim
        return flops

    def _heads(self, y: torch.Tensor) -> torch.Tensor:
        """(B, T, H*D) -> (B, H, T, D)."""
        return y.view(*y.shape[:-1], self.n_heads, self.head_dim).transpose(-3, -2)

    def forward(self, x: torch.Tensor, positions: Positions, state: LayerState | None = None) -> torch.Tensor:
        if state is not None:
            raise GenerationError("attention.kind: disentangled is an encoder's attention; it keeps no cache")
        table_module = positions.positional
        if not isinstance(table_module, DisentangledPositions):
            raise SpecError("attention.kind: disentangled needs positional.kind disentangled (the relative table)")
        B, T, _ = x.shape
        q, k, v = self._heads(self.q_proj(x)), self._heads(self.k_proj(x)), self._heads(self.v_proj(x))  # (B, H, T, D)
        bias = self._position_scores(q, k, table_module, positions.ids)  # (B, H, T, T)
        time = torch.arange(T, device=x.device)
        mask = visible_keys(time, time, None, positions.key_valid, False)  # (B|1, 1, T, T)
        attn_mask = (bias * self.scale).masked_fill(~mask, float("-inf"))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask.to(q.dtype), scale=self.scale)  # (B, H, T, D)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))

    def _position_scores(
        self, q: torch.Tensor, k: torch.Tensor, table_module: DisentangledPositions, ids: torch.Tensor
    ) -> torch.Tensor:
        """c2p + p2c, unscaled (B, H, T, S): each term gathers its (query or key) x table-row
        products at the bucketed distance of every pair."""
        span = table_module.span
        table = table_module.table().to(q.dtype)  # (2 * span, d)
        relative = table_module.relative(ids, ids)  # (B, T, S): bucket(pos_q - pos_k)
        B, H, T, _ = q.shape
        scores = torch.zeros(B, H, T, k.shape[2], dtype=q.dtype, device=q.device)
        if "c2p" in self.terms:
            pos_k = self._heads((self.pos_key_proj or self.k_proj)(table))  # (H, 2 * span, D)
            index = (relative + span).clamp(0, 2 * span - 1)[:, None].expand(B, H, -1, -1)  # (B, H, T, S)
            scores = scores + torch.matmul(q, pos_k.transpose(-1, -2)).gather(-1, index)
        if "p2c" in self.terms:
            pos_q = self._heads((self.pos_query_proj or self.q_proj)(table))  # (H, 2 * span, D)
            # key j reads row clamp(-bucket(pos_j - pos_i) + span): the distance matrix with
            # j in the query slot (self-attention: one matrix for both)
            index = (-relative + span).clamp(0, 2 * span - 1)[:, None].expand(B, H, -1, -1)  # (B, H, S, T)
            scores = scores + torch.matmul(k, pos_q.transpose(-1, -2)).gather(-1, index).transpose(-1, -2)
        return scores

    def extra_repr(self) -> str:
        return f"heads={self.n_heads}, head_dim={self.head_dim}, terms={'|'.join(self.terms)}"


def build_disentangled_attention(options: DisentangledAttentionOptions, ctx: BuildContext) -> DisentangledAttention:
    """DeBERTa's disentangled attention; the layer's positional must be ``disentangled``."""
    positional = ctx.layer.positional
    if positional.kind != "disentangled":
        raise SpecError(
            f"positional.kind: {positional.kind!r}; attention.kind disentangled reads the relative "
            "table of positional.kind disentangled"
        )
    span = positional.options.position_buckets or positional.options.max_relative_positions or ctx.max_seq_len
    return DisentangledAttention(options, ctx, 2 * span)


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register(
        "attention",
        "disentangled",
        build_disentangled_attention,
        options=DisentangledAttentionOptions,
        module=DisentangledAttention,
    )

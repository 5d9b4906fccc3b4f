"""Token embeddings: the token table, the positional ``embed`` hook, optional token-type
table and embedding norm (BERT: word + position + token type, then LayerNorm)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from pydantic import Field, NonNegativeInt, PositiveInt
from torch import nn

from zoo.components.linear import Linear
from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, Embedding, Positions
from zoo.specs.options import Options


class TokenEmbeddingOptions(Options):
    type_vocab_size: NonNegativeInt = Field(0, description="token-type (segment) table size; 0: none (BERT: 2)")
    norm: bool = Field(False, description="a norm of the model's norm kind after the sum (BERT's LayerNorm)")
    dim: PositiveInt | None = Field(
        None,
        description="table width (ELECTRA's embedding_size); default d_model. Narrower: a Linear "
        "projects the (normed) sum to d_model (ELECTRA's embeddings_project)",
    )


class TokenEmbedding(nn.Embedding, Embedding):
    """x = scale * table[ids] (+ positions) (+ type_table[type_ids]), then the optional norm,
    then the projection to d_model where the tables are narrower (``dim``).

    State-dict names: ``weight``, ``token_type.weight``, ``norm.*``, ``project.*``.
    """

    def __init__(self, options: TokenEmbeddingOptions, ctx: BuildContext) -> None:
        dim = options.dim or ctx.d_model
        super().__init__(ctx.vocab_size, dim)
        self.scale = ctx.embedding_scale
        self.token_type = nn.Embedding(options.type_vocab_size, dim) if options.type_vocab_size else None
        self.norm = ctx.make_norm(dim) if options.norm else None
        self.project = Linear(dim, ctx.d_model, bias=True) if dim != ctx.d_model else None
        self.quantized_rows: nn.Module | None = None  # set by zoo.quant, which then drops ``weight``

    def forward(  # type: ignore[override]
        self, input_ids: torch.Tensor, positions: Positions, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = self.lookup(input_ids)  # (B, T, d)
        if self.scale is not None:
            x = x * torch.tensor(self.scale, dtype=x.dtype)
        x = positions.positional.embed(x, positions.ids)
        if self.token_type is not None:
            types = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
            x = x + self.token_type(types)  # (B, T, dim)
        x = x if self.norm is None else self.norm(x)
        return x if self.project is None else self.project(x)  # (B, T, d)

    def lookup(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Rows of the token table (B, T, d): the float table, or the int8 rows that replace it
        when the weights are quantized (the table is then stored once, as int8)."""
        if self.quantized_rows is not None:
            return self.quantized_rows(input_ids)
        return super().forward(input_ids)


def build_token(options: TokenEmbeddingOptions, ctx: BuildContext) -> TokenEmbedding:
    """Token table with optional token types and embedding norm."""
    return TokenEmbedding(options, ctx)


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register("embedding", "token", build_token, options=TokenEmbeddingOptions, module=TokenEmbedding)

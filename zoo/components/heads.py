"""Output heads: causal LM (a Linear, optionally tied), masked LM (BERT's transform and tied
decoder), none (hidden states out, like transformers' AutoModel), pooler (hidden states,
plus ``pool``: dense + tanh on the first token).

State-dict names keep ``lm_head.weight`` for the LM heads, so every decoder checkpoint map
is unchanged; the masked-LM head adds ``dense.*``, ``norm.*`` and ``bias``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from pydantic import Field
from torch import nn

from zoo.components.activations import ACTIVATIONS, ActivationName
from zoo.components.linear import Linear
from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, Embedding, Head
from zoo.specs.options import Options


class CausalLMOptions(Options):
    bias: bool = Field(False, description="a bias on the vocabulary projection")
    scale: float | None = Field(None, gt=0, description="multiply the hidden states first (T5, tied: d_model ** -0.5)")
    logits_bias: bool = Field(
        False, description="a fixed per-token logits bias kept as a buffer, not a parameter (BART's final_logits_bias)"
    )


class MaskedLMOptions(Options):
    activation: ActivationName = Field("gelu", description="of the transform (BERT: exact gelu)")
    transform_bias: bool = Field(True, description="a bias on the transform's dense layer (ModernBERT: none)")


class NoHeadOptions(Options):
    pass


class PoolerOptions(Options):
    pass


class CausalLMHead(Linear, Head):
    """logits = x W^T (+ b); W is the embedding table when ``tie_embeddings``."""

    def __init__(self, options: CausalLMOptions, ctx: BuildContext) -> None:
        super().__init__(ctx.d_model, ctx.vocab_size, bias=options.bias)
        self.tied = ctx.tie_embeddings
        self.scale = options.scale
        # a persistent buffer: loaded and saved with the weights, neither trained nor counted
        self.final_logits_bias: torch.Tensor | None
        if options.logits_bias:
            self.register_buffer("final_logits_bias", torch.zeros(1, ctx.vocab_size))
        else:
            self.final_logits_bias = None

    def tie(self, embedding: Embedding) -> None:
        if self.tied:
            self.weight = embedding.weight  # type: ignore[assignment]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.scale is not None:
            x = x * self.scale  # (B, T, d)
        logits = super().forward(x)  # (B, T, vocab)
        return logits if self.final_logits_bias is None else logits + self.final_logits_bias.to(logits.dtype)


class MaskedLMHead(Linear, Head):
    """BERT's prediction head: norm(act(dense(x))) W^T + b, W tied to the token table."""

    def __init__(self, options: MaskedLMOptions, ctx: BuildContext) -> None:
        super().__init__(ctx.d_model, ctx.vocab_size, bias=True)
        self.dense = nn.Linear(ctx.d_model, ctx.d_model, bias=options.transform_bias)
        self.act = ACTIVATIONS[options.activation]
        self.norm = ctx.make_norm(ctx.d_model)
        self.tied = ctx.tie_embeddings

    def tie(self, embedding: Embedding) -> None:
        if self.tied:
            self.weight = embedding.weight  # type: ignore[assignment]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(self.norm(self.act(self.dense(x))))  # (B, T, vocab)


class NoHead(Head):
    """The final hidden states (B, T, d) are the output."""

    logits = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class PoolerHead(Head):
    """Hidden states out, plus BERT's pooler: ``pool(hidden) = tanh(dense(hidden[:, 0]))``."""

    logits = False

    def __init__(self, ctx: BuildContext) -> None:
        super().__init__()
        self.dense = nn.Linear(ctx.d_model, ctx.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def forward_param_count(self) -> int:
        """0: ``forward`` returns the hidden states; the pooler runs in ``pool`` (one row per
        sequence, 2·d² FLOPs), not in ``model(ids)``."""
        return 0

    def pool(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (B, T, d) -> (B, d): the first token through dense + tanh."""
        return torch.tanh(self.dense(hidden[:, 0]))


def build_causal_lm(options: CausalLMOptions, ctx: BuildContext) -> CausalLMHead:
    """Vocabulary projection (tied to the embedding when the spec says so)."""
    return CausalLMHead(options, ctx)


def build_masked_lm(options: MaskedLMOptions, ctx: BuildContext) -> MaskedLMHead:
    """BERT's masked-LM head: dense, activation, norm, tied decoder with a bias."""
    return MaskedLMHead(options, ctx)


def build_none(options: NoHeadOptions, ctx: BuildContext) -> NoHead:
    """No head: the model returns its final hidden states."""
    return NoHead()


def build_pooler(options: PoolerOptions, ctx: BuildContext) -> PoolerHead:
    """Hidden states out, with BERT's pooler (dense + tanh on the first token)."""
    return PoolerHead(ctx)


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register("head", "causal_lm", build_causal_lm, options=CausalLMOptions, module=CausalLMHead)
    register("head", "masked_lm", build_masked_lm, options=MaskedLMOptions, module=MaskedLMHead)
    register("head", "none", build_none, options=NoHeadOptions, module=NoHead)
    register("head", "pooler", build_pooler, options=PoolerOptions, module=PoolerHead)

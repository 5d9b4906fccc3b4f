"""ELECTRA's replaced-token-detection head: one score per token, ``dense_prediction(act(dense(x)))``.

The discriminator (ElectraForPreTraining) says for every position whether its token was
replaced by the generator. The output is (B, T, 1): a score per token, not scores over the
vocabulary, so the model cannot generate with it (``logits = False``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from pydantic import Field
from torch import nn

from zoo.components.activations import ACTIVATIONS, ActivationName
from zoo.components.linear import Linear
from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, Head
from zoo.specs.options import Options


class DiscriminatorOptions(Options):
    activation: ActivationName = Field("gelu", description="between the two dense layers (ELECTRA: hidden_act)")


class DiscriminatorHead(Head):
    """score = dense_prediction(act(dense(x))): (B, T, d) -> (B, T, 1).

    State-dict names: ``dense.*``, ``dense_prediction.*``.
    """

    logits = False

    def __init__(self, options: DiscriminatorOptions, ctx: BuildContext) -> None:
        super().__init__()
        self.dense = Linear(ctx.d_model, ctx.d_model, bias=True)
        self.act = ACTIVATIONS[options.activation]
        self.dense_prediction = Linear(ctx.d_model, 1, bias=True)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if not self.dense.weight.is_meta:
            for linear in (self.dense, self.dense_prediction):
                nn.init.normal_(linear.weight, std=0.02)
                nn.init.zeros_(linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(self.act(self.dense(x)))  # (B, T, 1)


def build_discriminator(options: DiscriminatorOptions, ctx: BuildContext) -> DiscriminatorHead:
    """ELECTRA's discriminator head (replaced-token detection)."""
    return DiscriminatorHead(options, ctx)


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register("head", "discriminator", build_discriminator, options=DiscriminatorOptions, module=DiscriminatorHead)

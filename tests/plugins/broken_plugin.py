"""zoo-misdeclared: a test plugin with two mixers that each break one part of the contract.

``mislabelled`` keeps a running sum (B, d) but declares it per token, so the analysis
would charge it per token of context; ``forgetful`` declares its state right but its
cached decode ignores it, so decode differs from the full forward. Each is otherwise correct.
"""

from __future__ import annotations

from pydantic import PositiveInt

import zoo
from zoo.parts import Linear
from zoo.specs.interfaces import StateTensor, TokenMixer
from zoo.specs.options import Options


class RunningMeanOptions(Options):
    n_heads: PositiveInt = 4  # what the rotary positional encoding reads
    head_dim: PositiveInt = 16


class RunningMean(TokenMixer):
    """x -> mean over tokens so far of proj(x): causal, state (B, d) per sequence."""

    per = "sequence"
    uses_state = True

    def __init__(self, options, ctx):  # type: ignore[no-untyped-def]
        super().__init__()
        self.d = ctx.d_model
        self.proj = Linear(ctx.d_model, ctx.d_model, bias=False)

    def forward(self, x, positions, state=None, memory=None):  # type: ignore[no-untyped-def]
        sums = self.proj(x).cumsum(dim=1)  # (B, T, d)
        if state is not None:
            previous = state.tensors["sum"]  # (B, d)
            if self.uses_state:
                sums = sums + previous[:, None]
            previous.copy_(sums[:, -1])
        return sums / (1 + positions.ids[..., None])

    def state_layout(self, batch_size, max_len, memory_len=0):  # type: ignore[no-untyped-def]
        return {"sum": StateTensor((batch_size, self.d), per=self.per)}

    def score_flops(self, n_new, context_len):  # type: ignore[no-untyped-def]
        return 2 * n_new * self.d


class Mislabelled(RunningMean):
    per = "token"


class Forgetful(RunningMean):
    uses_state = False


@zoo.hookimpl
def zoo_register_components(register):  # type: ignore[no-untyped-def]
    register("attention", "mislabelled", Mislabelled, options=RunningMeanOptions, module=Mislabelled)
    register("attention", "forgetful", Forgetful, options=RunningMeanOptions, module=Forgetful)

"""The shared shell of token mixers whose whole state is fixed per sequence.

Gated DeltaNet and Mamba2 are each a maths module with ``state_shapes(batch_size)`` and
``mix(x, state, token_valid)`` over explicit tensors (tested alone against transformers);
this base turns such a module into a registered ``TokenMixer``: every declared tensor is
``per="sequence"``, and ``forward`` hands ``mix`` the layer's state and which tokens are
real, so left padding never touches the state. Convolution windows (``windows``) take the
cache's dtype and the recurrent state ``state_dtype`` (float32 unless the spec says
``cache``), as transformers' caches keep them.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from zoo.specs.interfaces import Positions, TokenMixer, TokenNorm
from zoo.specs.state import LayerState, StateTensor


class SequenceStateMixer(TokenMixer):
    """Mixin over a maths module that defines ``state_shapes`` and ``mix``."""

    windows: ClassVar[tuple[str, ...]] = ("conv",)  # convolution windows: the cache's dtype
    state_dtype: torch.dtype | None = torch.float32  # the recurrent state's (factories set the spec's); None: cache's

    def state_shapes(self, batch_size: int) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    def mix(
        self, x: torch.Tensor, state: dict[str, torch.Tensor] | None, token_valid: torch.Tensor | None
    ) -> torch.Tensor:
        raise NotImplementedError

    def token_mix(
        self, x: torch.Tensor, norm: TokenNorm, state: dict[str, torch.Tensor], token_valid: torch.Tensor | None
    ) -> torch.Tensor | None:
        """x + ``mix`` of norm(x) for one cached token in one call, where the maths module has
        such a step; None by default (``residual_token``)."""
        return None

    def residual_token(
        self, x: torch.Tensor, norm: TokenNorm, positions: Positions, state: LayerState
    ) -> torch.Tensor | None:
        """``token_mix`` over the layer's state (``TokenMixer.residual_token``)."""
        return self.token_mix(x, norm, state.tensors, state.token_valid)

    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        """Per sequence, whatever the context (the conv window and the recurrent state)."""
        return {
            name: StateTensor(shape, None if name in self.windows else self.state_dtype, per="sequence")
            for name, shape in self.state_shapes(batch_size).items()
        }

    def forward(self, x: torch.Tensor, positions: Positions, state: LayerState | None = None) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d); padding tokens (``token_valid`` / ``key_valid`` False)
        leave the state untouched, so a left-padded row equals its unpadded run."""
        if state is None:
            return self.mix(x, None, positions.key_valid)
        return self.mix(x, state.tensors, state.token_valid)

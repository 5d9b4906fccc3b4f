"""What parts keep between calls: the declaration (``StateTensor``, ``HoldsState``) that the
cache allocates from and the analysis counts, and the views a forward call gets of it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

StatePer = Literal["token", "sequence", "memory"]


@dataclass(frozen=True)
class StateTensor:
    """One tensor a token mixer keeps between calls, declared by its ``state_layout``.

    ``per`` says how it grows: ``"token"`` has one slot per time step along one axis (K/V,
    latents; a sliding window caps the slots), ``"sequence"`` is fixed per sequence
    (a recurrent state, a convolution window), ``"memory"`` has one slot per encoder token
    (cross-attention K/V, written once per prompt). ``dtype=None`` means the cache's dtype.
    Cache bytes are summed from these declarations, so analysis and allocation cannot
    disagree.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype | None = None
    per: StatePer = "token"

    def nbytes(self, default_dtype: torch.dtype) -> int:
        dtype = self.dtype or default_dtype
        return math.prod(self.shape) * dtype.itemsize


class HoldsState:
    """What a part of a block keeps between calls (a mixer's K/V or recurrent state, a
    channel mix's token shift): declared once, read by the cache that allocates it and by
    the analysis that counts its bytes.

    ``stateful`` says whether the part keeps any; a stateful class overrides
    ``state_layout`` (checked at registration).
    """

    stateful: ClassVar[bool] = False

    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        """The tensors this part keeps between calls for ``batch_size`` sequences."""
        return {}

    def reset_state(self, state: dict[str, torch.Tensor]) -> None:
        """Forget one cache's state before a new prompt: zero what is declared per sequence.

        Per-token slots need nothing (they are masked by time until overwritten).
        """
        for name, declared in self.state_layout(1, 1, 1).items():
            if declared.per == "sequence":
                state[name].zero_()


@dataclass
class Memory:
    """The encoder output a cross-attention reads: hidden (B, S, d), valid (B, S) or None."""

    hidden: torch.Tensor  # (B, S, d)
    valid: torch.Tensor | None = None  # (B, S) bool, False at padding


@dataclass
class LayerState:
    """One token mixer's view of the cache for one forward call.

    ``tensors`` are the mixer's declared state tensors (written in place). ``time`` (T,) is
    the cache slot of each token of this call; ``key_valid`` (B, max_len) is False at
    padding slots; ``token_valid`` (B, T) is False for this call's padding tokens (a
    recurrent mixer must not update its state on them); ``memory_valid`` (B, memory_len)
    is False at encoder padding and at memory slots past the encoder's length. ``filled``:
    eager calls only, the slots written so far (this call's included); None when compiled.
    """

    tensors: dict[str, torch.Tensor]
    time: torch.Tensor  # (T,)
    key_valid: torch.Tensor | None  # (B, max_len)
    max_len: int
    filled: int | None = None
    token_valid: torch.Tensor | None = None  # (B, T)
    memory_valid: torch.Tensor | None = None  # (B, memory_len)


@dataclass
class BlockState:
    """One block's view of the cache: each stateful part's ``LayerState`` (None: the part
    keeps none, or the call is uncached)."""

    attention: LayerState | None = None
    cross_attention: LayerState | None = None
    ffn: LayerState | None = None


NO_STATE = BlockState()

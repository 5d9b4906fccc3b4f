"""Choosing the next token from logits: greedy, temperature, top-k, top-p (nucleus).

Settings are checked once (``SamplingSettings``) so a bad value fails before any compute;
``sample`` then runs per step on the device without host syncs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.errors import GenerationError
from zoo.specs import host_functions


@dataclass(frozen=True)
class SamplingSettings:
    """How the next token is drawn. ``temperature=0`` is greedy (argmax)."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.temperature, bool) or not 0 <= self.temperature < float("inf"):  # also rejects NaN
            raise GenerationError(f"temperature: must be a finite number >= 0 (0 = greedy), got {self.temperature}")
        if self.top_k is not None and (
            isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1
        ):
            raise GenerationError(f"top_k: must be an integer >= 1 or None, got {self.top_k!r}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise GenerationError(f"top_p: must be in (0, 1] or None, got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def filter_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Logits (B, V) with all but the k largest per row set to -inf."""
    k = min(k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[:, -1:]  # (B, 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def filter_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Logits (B, V) keeping the smallest set of top tokens whose probability reaches p.

    A token is kept when the probability mass ranked above it is still below p, so the
    most likely token always survives.
    """
    if p >= 1:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, V)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs  # (B, V)
    drop_sorted = mass_before >= p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # back to vocab order
    return logits.masked_fill(drop, float("-inf"))


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """The index of the largest logit (..., V) -> (...), the first where several tie (as
    ``argmax``). On the CPU one C++ call where a component supplies it (``host_functions``:
    ``zoo.components.cpu_token_ops.greedy``): ATen's CPU argmax does not vectorise, and a
    151,936-logit row (qwen3's vocabulary) took 150-175 µs of a decode step against the loop's
    16-24. Elsewhere, in half precision through ``max``, which a CPU without the extension
    also vectorises better (a bfloat16 row of 49,152 logits: 84 µs against argmax's 180); in
    float32 ``argmax``."""
    picked = host_functions.greedy(logits)
    if picked is not None:
        return picked
    if logits.dtype in (torch.bfloat16, torch.float16):
        return logits.max(dim=-1).indices
    return logits.argmax(dim=-1)


def sample(logits: torch.Tensor, settings: SamplingSettings, generator: torch.Generator | None = None) -> torch.Tensor:
    """Next token ids (B,) from logits (B, V)."""
    if settings.greedy:
        return greedy(logits)  # (B,)
    scaled = logits.float() / settings.temperature  # (B, V)
    if settings.top_k is not None:
        scaled = filter_top_k(scaled, settings.top_k)
    if settings.top_p is not None:
        scaled = filter_top_p(scaled, settings.top_p)
    probs = torch.softmax(scaled, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]  # (B,)


SEED_RANGE = (0, 2**64 - 1)


def check_seed(seed: object, error: type[Exception] = GenerationError) -> None:
    """A seed torch can take: an integer in 0 .. 2**64 - 1 (or None for no seed)."""
    low, high = SEED_RANGE
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, int) or not low <= seed <= high:
        raise error(f"seed: must be an integer from {low} to 2**64 - 1 ({high}), got {seed!r}")

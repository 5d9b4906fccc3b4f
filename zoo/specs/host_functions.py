"""Functions the model layer calls outside any part, which a component may supply faster.

The model layer may not import the components (tests/test_house_rules.py: they are one tier),
so, as transformers' attention-function table lets an integration supply the attention a
model calls by name, a component supplies such a function here when it imports and the model
layer asks the table. A supplier answers None where it does not apply (another device, dtype
or layout), and the model layer then runs its own PyTorch. One function so far: the greedy
pick of the next token (``zoo.model.sampling.greedy``; supplied by
``zoo.components.cpu_token_ops`` on the CPU).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Pick = Callable[[torch.Tensor], "torch.Tensor | None"]  # logits (..., V) -> indices (...), or None

_GREEDY: list[Pick] = []


def supply_greedy(pick: Pick) -> None:
    """Offer ``pick`` for ``greedy`` (once: a re-imported module's function replaces its old one)."""
    _GREEDY[:] = [
        known for known in _GREEDY if known.__qualname__ != pick.__qualname__ or known.__module__ != pick.__module__
    ]
    _GREEDY.append(pick)


def greedy(logits: torch.Tensor) -> torch.Tensor | None:
    """The first supplier's greedy pick that applies to ``logits``, or None."""
    for pick in _GREEDY:
        picked = pick(logits)
        if picked is not None:
            return picked
    return None

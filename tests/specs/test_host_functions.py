"""zoo.specs.host_functions: the first supplier that applies answers; none that does, None."""

from __future__ import annotations

import torch

from zoo.specs import host_functions


def test_the_first_supplier_that_applies_picks_and_a_resupplied_one_replaces_itself(monkeypatch):
    monkeypatch.setattr(host_functions, "_GREEDY", [])
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    assert host_functions.greedy(logits) is None

    def declines(x: torch.Tensor) -> torch.Tensor | None:
        return None

    def picks(x: torch.Tensor) -> torch.Tensor | None:
        return x.argmax(-1)

    host_functions.supply_greedy(declines)
    host_functions.supply_greedy(picks)
    host_functions.supply_greedy(picks)  # a module imported again supplies its function again
    assert len(host_functions._GREEDY) == 2
    assert torch.equal(host_functions.greedy(logits), torch.tensor([1]))

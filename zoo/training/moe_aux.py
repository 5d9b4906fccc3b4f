"""The mixture-of-experts load-balancing loss (Switch Transformer; Mixtral's and Qwen-MoE's form).

loss = E * sum_e f_e * P_e, with f_e the fraction of (token, slot) pairs routed to expert e
and P_e the mean router probability of e, over every MoE layer's tokens together (as
transformers' ``load_balancing_loss_func``). The router's logits are taken by a forward hook
on each MoE's router, so the MoE module itself is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from zoo.components.moe import MoE


class RouterLogits:
    """Collects every MoE router's logits (N, E) during one forward."""

    def __init__(self, model: nn.Module) -> None:
        self.moes = [m for m in model.modules() if isinstance(m, MoE)]
        self.logits: list[torch.Tensor] = []

    @contextmanager
    def recording(self) -> Iterator[RouterLogits]:
        self.logits = []
        handles = [m.router.register_forward_hook(self._keep) for m in self.moes]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()

    def _keep(self, module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        self.logits.append(output.reshape(-1, output.shape[-1]))  # (N, E)

    def loss(self) -> torch.Tensor | None:
        """The balancing loss over what was recorded, None without MoE layers."""
        if not self.logits:
            return None
        top_k, n_experts = self.moes[0].top_k, self.moes[0].n_experts
        return load_balancing_loss(torch.cat(self.logits, dim=0), n_experts, top_k)


def load_balancing_loss(router_logits: torch.Tensor, n_experts: int, top_k: int) -> torch.Tensor:
    """router_logits (N, E) of all layers' tokens -> scalar E * sum_e f_e * P_e."""
    probs = F.softmax(router_logits.float(), dim=-1)  # (N, E)
    _, chosen = torch.topk(probs, top_k, dim=-1)  # (N, k)
    routed = F.one_hot(chosen, n_experts).float()  # (N, k, E)
    fraction = routed.mean(dim=0)  # (k, E)
    mean_prob = probs.mean(dim=0)  # (E,)
    return (fraction * mean_prob[None]).sum() * n_experts

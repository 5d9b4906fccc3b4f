"""DeepSeek's mixture of experts: shared experts plus routed experts, V2 and V3 routing.

Routing, computed in float32 as DeepSeek does:
- scores: ``softmax`` over the router logits (V2) or ``sigmoid`` of each (V3);
- choice: ``greedy`` top-k of the scores; ``group_limited_greedy`` (V2) keeps the
  ``topk_group`` groups whose best score is highest; ``noaux_tc`` (V3) adds the learned
  ``e_score_correction_bias`` to the scores for choosing only, and ranks groups by the sum
  of their two best biased scores;
- weights: the chosen experts' unbiased scores, optionally renormalised to sum to 1
  (``norm_topk_prob``), times ``routed_scaling_factor``.
The experts themselves are zoo's stacked-weight MoE (``zoo.parts.MoE``): this
module only replaces its routing and adds the correction bias.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, NonNegativeInt, PositiveInt, model_validator
from torch import nn

from zoo.parts import BuildContext, MoE, MoEOptions, Options


class DeepSeekMoEOptions(Options):
    tiny: ClassVar[Mapping[str, Any]] = {"n_experts": 4, "top_k": 2, "hidden": 32, "n_group": 2, "topk_group": 1}

    n_experts: PositiveInt = Field(description="routed experts (n_routed_experts)")
    top_k: PositiveInt = Field(description="routed experts per token (num_experts_per_tok)")
    hidden: PositiveInt = Field(description="inner width of each expert (moe_intermediate_size)")
    n_shared_experts: NonNegativeInt = Field(0, description="always-on experts, run as one MLP of n * hidden")
    scoring: Literal["softmax", "sigmoid"] = Field("softmax", description="scoring_func")
    topk_method: Literal["greedy", "group_limited_greedy", "noaux_tc"] = "greedy"
    n_group: PositiveInt | None = Field(None, description="expert groups (group_limited_greedy, noaux_tc)")
    topk_group: PositiveInt | None = Field(None, description="groups a token may route into")
    norm_topk_prob: bool = Field(False, description="renormalise the chosen weights to sum to 1")
    routed_scaling_factor: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _check(self) -> DeepSeekMoEOptions:
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k: {self.top_k} exceeds n_experts={self.n_experts}; allowed: 1..{self.n_experts}")
        if self.topk_method == "greedy":
            return self
        if self.n_group is None or self.topk_group is None:
            raise ValueError(f"n_group: {self.topk_method} routing needs n_group and topk_group")
        if self.n_experts % self.n_group:
            raise ValueError(f"n_group: n_experts={self.n_experts} is not divisible by n_group={self.n_group}")
        if self.topk_group > self.n_group:
            raise ValueError(
                f"topk_group: {self.topk_group} exceeds n_group={self.n_group}; allowed: 1..{self.n_group}"
            )
        if self.topk_method == "noaux_tc" and self.n_experts // self.n_group < 2:
            raise ValueError("n_group: noaux_tc ranks groups by their two best experts; groups need >= 2 experts")
        return self


class DeepSeekMoE(MoE):
    """Routed experts with DeepSeek's routing plus shared experts; parameter names as zoo's MoE."""

    def __init__(self, options: DeepSeekMoEOptions, d_model: int) -> None:
        shared = options.hidden * options.n_shared_experts or None
        base = MoEOptions(n_experts=options.n_experts, top_k=options.top_k, hidden=options.hidden, shared_hidden=shared)
        super().__init__(base, d_model)
        self.deepseek = options
        if options.topk_method == "noaux_tc":
            self.register_buffer("e_score_correction_bias", torch.zeros(options.n_experts))
        else:
            self.e_score_correction_bias = None

    def reset_parameters(self) -> None:
        super().reset_parameters()
        bias = getattr(self, "e_score_correction_bias", None)
        if bias is not None and not bias.is_meta:
            nn.init.zeros_(bias)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Expert weights (N, k) and indices (N, k) for tokens x (N, d)."""
        opts = self.deepseek
        logits = F.linear(x.float(), self.router.weight.float())  # (N, E) float32
        scores = logits.softmax(dim=-1) if opts.scoring == "softmax" else logits.sigmoid()
        choice = scores
        if self.e_score_correction_bias is not None:
            choice = scores + self.e_score_correction_bias.float()  # for choosing only
        if opts.topk_method != "greedy":
            assert opts.n_group is not None and opts.topk_group is not None
            grouped = choice.view(-1, opts.n_group, self.n_experts // opts.n_group)  # (N, G, E/G)
            if opts.topk_method == "noaux_tc":
                group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)  # (N, G)
            else:
                group_scores = grouped.amax(dim=-1)
            groups = group_scores.topk(opts.topk_group, dim=-1).indices  # (N, topk_group)
            keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, groups, True)  # (N, G)
            keep = keep[..., None].expand_as(grouped).reshape(-1, self.n_experts)  # (N, E)
            choice = choice.masked_fill(~keep, float("-inf"))
        index = choice.topk(self.top_k, dim=-1).indices  # (N, k)
        weights = scores.gather(1, index)  # (N, k) unbiased scores
        if opts.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return (weights * opts.routed_scaling_factor).to(x.dtype), index


def build_deepseek_moe(options: DeepSeekMoEOptions, ctx: BuildContext) -> DeepSeekMoE:
    """DeepSeek MoE: shared experts, softmax/sigmoid scores, greedy/grouped top-k."""
    return DeepSeekMoE(options, ctx.d_model)

"""Mixture of experts: a router picks top-k experts per token; optional shared experts.

Covers Mixtral and Qwen3-MoE (softmax over all experts, top-k, renormalised), gpt-oss
(top-k logits then softmax over those k; experts with biases and a clamped SwiGLU) and
always-on shared experts. Expert weights are stacked (E, out, in) tensors, so a decode step
has static shapes and compiles whole. Which path runs is decided on static facts only:
few tokens (N*k <= E) gather their experts' rows; more tokens are sorted by expert and run
through one grouped matmul per projection (``torch._grouped_mm``: no host sync, no Python
loop over experts) where the device and dtype have it (zoo/components/grouped_mm.py); a
compiled step without it runs every expert densely, and only an eager step without it
(CUDA below sm90 or not bf16) loops over the experts in use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt, model_validator
from torch import nn

from zoo.components.activations import ACTIVATIONS
from zoo.components.ffn import GatedMLP
from zoo.components.grouped_mm import expert_offsets, grouped_mm_supported
from zoo.components.linear import Linear
from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, FeedForward
from zoo.specs.options import Options


class MoEOptions(Options):
    tiny: ClassVar[Mapping[str, Any]] = {"n_experts": 4, "top_k": 2, "hidden": 32, "shared_hidden": 32}

    n_experts: PositiveInt
    top_k: PositiveInt
    hidden: PositiveInt = Field(description="inner width of each expert")
    activation: Literal["silu", "gelu", "gelu_tanh", "relu", "swiglu_oai"] = "silu"
    gated: bool = Field(True, description="experts are gated MLPs (swiglu_oai implies it)")
    bias: bool = Field(False, description="biases in the experts")
    router_bias: bool = False
    routing: Literal["softmax_topk", "topk_softmax"] = Field(
        "softmax_topk", description="softmax over all then top-k (Mixtral, Qwen) or top-k then softmax (gpt-oss)"
    )
    renormalize: bool = Field(True, description="rescale the top-k probabilities to sum to 1 (softmax_topk)")
    shared_hidden: PositiveInt | None = Field(None, description="width of an always-on shared gated MLP")
    shared_gate: bool = Field(False, description="scale the shared expert by sigmoid(x . w) (Qwen3-Next)")
    clamp_limit: float | None = Field(None, gt=0, description="swiglu_oai: gate <= limit, |up| <= limit")
    alpha: float = Field(1.702, description="swiglu_oai: sigmoid sharpness")

    @model_validator(mode="after")
    def _check(self) -> MoEOptions:
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k: {self.top_k} exceeds n_experts={self.n_experts}; allowed: 1..{self.n_experts}")
        if self.shared_gate and not self.shared_hidden:
            raise ValueError("shared_gate: needs a shared expert; set shared_hidden")
        if self.activation == "swiglu_oai" and not self.gated:
            raise ValueError("gated: swiglu_oai experts are gated; set gated=true")
        return self


class MoE(FeedForward):
    """Routed experts (stacked weights) plus an optional shared expert."""

    def __init__(self, options: MoEOptions, d_model: int) -> None:
        super().__init__()
        self.options = options
        E, Fh, d = options.n_experts, options.hidden, d_model
        self.n_experts, self.top_k = E, options.top_k
        self.router = Linear(d, E, bias=options.router_bias)
        self.w_up = nn.Parameter(torch.empty(E, Fh, d))
        self.w_gate = nn.Parameter(torch.empty(E, Fh, d)) if options.gated else None
        self.w_down = nn.Parameter(torch.empty(E, d, Fh))
        self.b_up = nn.Parameter(torch.empty(E, Fh)) if options.bias else None
        self.b_gate = nn.Parameter(torch.empty(E, Fh)) if options.bias and options.gated else None
        self.b_down = nn.Parameter(torch.empty(E, d)) if options.bias else None
        self.shared = GatedMLP(d, options.shared_hidden, "silu", False) if options.shared_hidden else None
        self.shared_gate = Linear(d, 1, bias=False) if options.shared_gate else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for name, param in self.named_parameters(recurse=False):
            if param.is_meta:
                continue
            if name.startswith("b_"):
                nn.init.zeros_(param)
            else:
                nn.init.normal_(param, std=0.02)

    def routed_param_count(self) -> int:
        return sum(p.numel() for n, p in self.named_parameters(recurse=False))

    def active_param_count(self) -> int:
        """Parameters a token touches: router, shared expert and top_k of the experts."""
        total = sum(p.numel() for p in self.parameters())
        routed = self.routed_param_count()
        return total - routed + routed * self.top_k // self.n_experts

    # ---- routing --------------------------------------------------------------------------
    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Expert weights (N, k) and indices (N, k) for tokens x (N, d)."""
        logits = self.router(x)  # (N, E)
        if self.options.routing == "topk_softmax":
            top, index = torch.topk(logits, self.top_k, dim=-1)
            return F.softmax(top, dim=-1, dtype=top.dtype), index
        probs = F.softmax(logits, dim=-1, dtype=torch.float32)
        weights, index = torch.topk(probs, self.top_k, dim=-1)
        if self.options.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), index

    def _activate(self, gate: torch.Tensor | None, up: torch.Tensor) -> torch.Tensor:
        opts = self.options
        if gate is None:
            return ACTIVATIONS[opts.activation](up)
        if opts.activation == "swiglu_oai":
            limit = opts.clamp_limit if opts.clamp_limit is not None else math.inf
            gate = gate.clamp(max=limit)
            up = up.clamp(min=-limit, max=limit)
            return (up + 1) * gate * torch.sigmoid(gate * opts.alpha)
        return ACTIVATIONS[opts.activation](gate) * up

    # ---- experts --------------------------------------------------------------------------
    def _experts_gathered(self, x: torch.Tensor, weights: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Few tokens (decode): gather each token's k experts; static shapes, no loops."""
        up = torch.einsum("nd,nkfd->nkf", x, self.w_up[index])  # (N, k, F)
        if self.b_up is not None:
            up = up + self.b_up[index]
        gate = None
        if self.w_gate is not None:
            gate = torch.einsum("nd,nkfd->nkf", x, self.w_gate[index])
            if self.b_gate is not None:
                gate = gate + self.b_gate[index]
        h = self._activate(gate, up)  # (N, k, F)
        out = torch.einsum("nkf,nkdf->nkd", h, self.w_down[index])  # (N, k, d)
        if self.b_down is not None:
            out = out + self.b_down[index]
        return (out * weights[..., None]).sum(dim=1)  # (N, d)

    def _experts_looped(self, x: torch.Tensor, weights: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Many tokens (prefill): run each expert once on the tokens routed to it."""
        out = torch.zeros_like(x)  # (N, d)
        for e in torch.unique(index).tolist():
            token, slot = torch.nonzero(index == e, as_tuple=True)
            xe = x[token]  # (n_e, d)
            up = xe @ self.w_up[e].T
            if self.b_up is not None:
                up = up + self.b_up[e]
            gate = None
            if self.w_gate is not None:
                gate = xe @ self.w_gate[e].T
                if self.b_gate is not None:
                    gate = gate + self.b_gate[e]
            ye = self._activate(gate, up) @ self.w_down[e].T  # (n_e, d)
            if self.b_down is not None:
                ye = ye + self.b_down[e]
            out.index_add_(0, token, ye * weights[token, slot, None])
        return out

    def _experts_grouped(self, x: torch.Tensor, weights: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Many tokens: sort the (token, slot) pairs by expert, one grouped matmul per projection.

        Every shape is static (N*k rows) and the group boundaries stay on the device, so
        there is no host sync and no loop over experts; each expert's weights are read once.
        """
        N, k = index.shape
        flat_index = index.reshape(-1)  # (N*k,)
        order = torch.argsort(flat_index, stable=True)  # (N*k,) pairs grouped by expert
        token = order // k  # (N*k,) the token of each sorted pair
        offsets = expert_offsets(flat_index, self.n_experts)  # (E,) int32 end row of each group
        xs = x[token]  # (N*k, d)
        up = torch._grouped_mm(xs, self.w_up.transpose(1, 2), offs=offsets)  # (N*k, F)
        sorted_expert = flat_index[order]  # (N*k,)
        if self.b_up is not None:
            up = up + self.b_up[sorted_expert]
        gate = None
        if self.w_gate is not None:
            gate = torch._grouped_mm(xs, self.w_gate.transpose(1, 2), offs=offsets)
            if self.b_gate is not None:
                gate = gate + self.b_gate[sorted_expert]
        h = self._activate(gate, up)  # (N*k, F)
        ys = torch._grouped_mm(h, self.w_down.transpose(1, 2), offs=offsets)  # (N*k, d)
        if self.b_down is not None:
            ys = ys + self.b_down[sorted_expert]
        ys = ys * weights.reshape(-1)[order, None].to(ys.dtype)
        return torch.zeros_like(x).index_add_(0, token, ys)  # (N, d)

    def _experts_dense(self, x: torch.Tensor, weights: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Under torch.compile: every expert on every token, weighted by the routing.

        Static shapes, each expert's weights read once (what a memory-bound decode step
        pays anyway once N*k > E); unrouted experts get weight 0.
        """
        combine = torch.zeros(x.shape[0], self.n_experts, dtype=x.dtype, device=x.device)  # (N, E)
        combine = combine.scatter(1, index, weights.to(x.dtype))
        up = torch.einsum("nd,efd->nef", x, self.w_up)  # (N, E, F)
        if self.b_up is not None:
            up = up + self.b_up
        gate = None
        if self.w_gate is not None:
            gate = torch.einsum("nd,efd->nef", x, self.w_gate)
            if self.b_gate is not None:
                gate = gate + self.b_gate
        h = self._activate(gate, up) * combine[..., None]  # (N, E, F)
        out = torch.einsum("nef,edf->nd", h, self.w_down)  # (N, d)
        if self.b_down is not None:
            out = out + combine @ self.b_down
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])  # (N, d)
        weights, index = self.route(flat)  # (N, k)
        # the path is chosen on static information only, so a compiled step never breaks
        if flat.shape[0] * self.top_k <= self.n_experts:
            out = self._experts_gathered(flat, weights, index)
        elif grouped_mm_supported(flat, self.options.hidden):
            out = self._experts_grouped(flat, weights, index)
        elif torch.compiler.is_compiling():
            out = self._experts_dense(flat, weights, index)
        else:
            out = self._experts_looped(flat, weights, index)
        if self.shared is not None:
            shared = self.shared(flat)  # (N, d)
            if self.shared_gate is not None:
                shared = shared * torch.sigmoid(self.shared_gate(flat))
            out = out + shared
        return out.view(shape)  # (B, T, d)


def build_moe(options: MoEOptions, ctx: BuildContext) -> MoE:
    """Mixture of experts with top-k routing and optional shared experts."""
    return MoE(options, ctx.d_model)


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register("ffn", "moe", build_moe, options=MoEOptions, module=MoE)

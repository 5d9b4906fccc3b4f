"""The shared maths of kernel (feature-map) attention: the `attention` kinds ``linear`` and ``infini``.

Both replace softmax by a positive feature map φ(x) = elu(x) + 1 and keep a running state
per head: S (B, H, D, D) = Σ φ(k) vᵀ and z (B, H, D) = Σ φ(k), read as φ(q)·S / (φ(q)·z + eps).
Linear attention adds every token to the state; Infini-attention adds whole segments (its
compressive memory). The options, the q/k/v/o projections, the feature map and the state's
read and write live here once, so both kinds compute them the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt, ValidationInfo, model_validator

from zoo.components import fused
from zoo.components.linear import Linear, StepTensors, step_tensors
from zoo.specs.interfaces import BuildContext, Positions, TokenMixer
from zoo.specs.options import Options
from zoo.specs.state import LayerState

EPS = 1e-6


class FeatureStateOptions(Options):
    """Heads of a kernel-attention kind; ``head_dim`` defaults to d_model // n_heads. Each kind
    declares its own ``bias`` (the q, k, v and output projections), after its other options,
    so a spec lists its fields in the kind's order."""

    tiny: ClassVar[Mapping[str, Any]] = {"n_heads": 4, "head_dim": 16}

    n_heads: PositiveInt
    head_dim: PositiveInt | None = Field(None, description="default d_model // n_heads")

    @model_validator(mode="before")
    @classmethod
    def _fill_head_dim(cls, data: Any, info: ValidationInfo) -> Any:
        d_model = (info.context or {}).get("d_model")
        n_heads = data.get("n_heads") if isinstance(data, dict) else None
        if (
            isinstance(data, dict)
            and data.get("head_dim") is None
            and isinstance(n_heads, int)
            and n_heads > 0
            and isinstance(d_model, int)
        ):
            if d_model % n_heads:
                raise ValueError(f"head_dim: not given and d_model={d_model} is not divisible by n_heads={n_heads}")
            data = {**data, "head_dim": d_model // n_heads}
        return data


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = elu(x) + 1: positive, so the normaliser φ(q)·z never changes sign."""
    return F.elu(x) + 1.0


def state_read(q: torch.Tensor, state: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """φ(q) (B, H, L, D) against S (B, H, D, D), z (B, H, D) -> (B, H, L, D)."""
    denominator = torch.matmul(q, z[..., None])  # (B, H, L, 1)
    return torch.matmul(q, state) / (denominator + EPS)


def state_write(
    k: torch.Tensor, v: torch.Tensor, state: torch.Tensor, z: torch.Tensor, delta: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """φ(K), V (B, H, L, D) added into S, z; zero keys write nothing. With ``delta`` only
    what S does not already return for K is written (the delta rule)."""
    if delta:
        v = v - state_read(k, state, z)  # (B, H, L, D)
    return state + torch.matmul(k.transpose(-1, -2), v), z + k.sum(dim=2)


class FeatureStateMixer(TokenMixer):
    """The projections of a kernel-attention kind and the load/store of its (S, z) state."""

    causal = True

    def __init__(self, options: FeatureStateOptions, ctx: BuildContext, *, bias: bool) -> None:
        super().__init__()
        self.n_heads = options.n_heads
        self.state_dtype = ctx.state_dtype  # S and z: float32 unless the spec's state_dtype is "cache"
        self.head_dim = int(options.head_dim or ctx.d_model // options.n_heads)
        inner = self.n_heads * self.head_dim
        self.q_proj = Linear(ctx.d_model, inner, bias=bias)
        self.k_proj = Linear(ctx.d_model, inner, bias=bias)
        self.v_proj = Linear(ctx.d_model, inner, bias=bias)
        self.o_proj = Linear(inner, ctx.d_model, bias=bias)

    def fusable_projections(self) -> dict[str, tuple[str, ...]]:
        """q, k and v read the same input (``zoo.fuse_projections``), as attention's do."""
        return {"qkv_proj": fused.QKV}

    def project(self, x: torch.Tensor, positions: Positions | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, d) -> q, k, v (B, H, T, D) each (one product when fused); RoPE, when the
        layer has it, rotates q and k."""
        B, T, _ = x.shape
        H, D = self.n_heads, self.head_dim
        q, k, v = (
            p.view(B, T, H, D).transpose(1, 2) for p in fused.project(self, "qkv_proj", fused.QKV, x)
        )  # (B, H, T, D)
        if positions is not None:
            q, k = positions.rotate(q, k)
        return q, k, v

    def token_projections(self, positions: Positions | None) -> list[StepTensors] | None:
        """The fused q|k|v layer's and o_proj's ``RowStackable.step_tensors`` for a one-call
        token step (``cpu_steps.linear_token``, ``infini_token``), or None: q and k rotated (RoPE
        turns them between the product and the step), q, k and v separate layers (not fused by
        ``zoo.fuse_projections``) or a layer that makes its product its own. The layers are read
        from nn.Module's dicts (``Attention._token_step``)."""
        if positions is not None and positions.rotation is not None:
            return None
        modules = self._modules
        return step_tensors(modules.get("qkv_proj"), modules["o_proj"])

    def load_state(
        self, state: LayerState | None, names: tuple[str, str], batch_size: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's S (B, H, D, D) and z (B, H, D) under ``names``; zeros without a cache."""
        if state is None:
            H, D = self.n_heads, self.head_dim
            return torch.zeros(batch_size, H, D, D, device=device), torch.zeros(batch_size, H, D, device=device)
        return state.tensors[names[0]].float(), state.tensors[names[1]].float()  # float32 maths, any stored dtype

    @staticmethod
    def store_state(state: LayerState | None, names: tuple[str, str], s: torch.Tensor, z: torch.Tensor) -> None:
        """Write S and z back into the cache in place (nothing without one)."""
        if state is not None:
            state.tensors[names[0]].copy_(s)
            state.tensors[names[1]].copy_(z)

    def output(self, y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Heads y (B, H, T, D) -> o_proj (B, T, d) in the input's dtype."""
        B, H, T, D = y.shape
        return self.o_proj(y.transpose(1, 2).reshape(B, T, H * D).to(dtype))

"""Rotary position embedding: frequencies (plain, llama3, YaRN, linear) and the rotation.

The frequency formulas follow transformers' ``modeling_rope_utils`` so that checkpoints load
with identical logits.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field, model_validator

from zoo.components import cpu_token_ops
from zoo.specs.interfaces import Rotation
from zoo.specs.options import Options


class RopeScaling(Options):
    type: Literal["llama3", "yarn", "linear"]
    factor: float = Field(gt=0)
    # llama3
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int | None = Field(None, gt=0)
    # yarn
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True

    @model_validator(mode="after")
    def _needs_original_length(self) -> RopeScaling:
        if self.type in ("llama3", "yarn") and self.original_max_position_embeddings is None:
            raise ValueError(f"original_max_position_embeddings: required for {self.type} scaling")
        return self


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_attention_factor(scaling: RopeScaling | None) -> float:
    """The factor applied to cos and sin: 1, or YaRN's attention scaling."""
    if scaling is None or scaling.type != "yarn":
        return 1.0
    if scaling.attention_factor is not None:
        return float(scaling.attention_factor)
    if scaling.mscale and scaling.mscale_all_dim:
        return _yarn_mscale(scaling.factor, scaling.mscale) / _yarn_mscale(scaling.factor, scaling.mscale_all_dim)
    return _yarn_mscale(scaling.factor)


def rope_frequencies(dim: int, theta: float, scaling: RopeScaling | None) -> tuple[torch.Tensor, float]:
    """Inverse frequencies (dim/2,) in float32 on the CPU, and the factor applied to cos and sin."""
    exponents = torch.arange(0, dim, 2, dtype=torch.int64, device="cpu").float() / dim  # (dim/2,)
    inv_freq = 1.0 / (theta**exponents)
    if scaling is None:
        return inv_freq, 1.0
    if scaling.type == "linear":
        return inv_freq / scaling.factor, 1.0
    if scaling.type == "llama3":
        old_len = float(scaling.original_max_position_embeddings or 0)
        low_wavelen = old_len / scaling.low_freq_factor
        high_wavelen = old_len / scaling.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
        smooth = (old_len / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
        smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled), 1.0
    # yarn
    factor = scaling.factor
    original = float(scaling.original_max_position_embeddings or 0)

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(scaling.beta_fast), correction_dim(scaling.beta_slow)
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32, device="cpu") - low) / (high - low)).clamp(0, 1)
    extrapolation = 1 - ramp  # 1 keeps the original frequency
    inv_interp = inv_freq / factor
    return inv_interp * (1 - extrapolation) + inv_freq * extrapolation, rope_attention_factor(scaling)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def deinterleave(x: torch.Tensor) -> torch.Tensor:
    """(x0, x1, x2, x3, ...) -> (x0, x2, ..., x1, x3, ...): interleaved pairs to halves.

    Applied to both q and k it leaves every score unchanged, and turns GPT-J style
    (interleaved) rotation into the half-split rotation below.
    """
    *lead, d = x.shape
    return x.view(*lead, d // 2, 2).transpose(-1, -2).reshape(*lead, d)


class RopeRotation(Rotation):
    """Rotates the first ``rot_dim`` channels of each head of q and k (B, H, T, D).

    Made once per forward and shared by every layer, so the cos/sin tables are cast to each
    dtype once, and ``rotate_half(x) * sin`` is computed as ``roll(x) * signed_sin`` (the same
    products, signs exact): one op instead of a negation and a concatenation per call.
    """

    def __init__(self, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> None:
        self.cos = cos  # (B, 1, T, rot_dim) float32
        self.sin = sin
        self.rot_dim = cos.shape[-1]
        self.interleaved = interleaved
        self._tables: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}

    def _tables_for(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        if dtype not in self._tables:
            half = self.rot_dim // 2
            signed_sin = torch.cat((-self.sin[..., :half], self.sin[..., half:]), dim=-1)  # (B, 1, T, rot_dim)
            self._tables[dtype] = (self.cos.to(dtype), signed_sin.to(dtype))
        return self._tables[dtype]

    def _apply(self, x: torch.Tensor) -> torch.Tensor:
        cos, signed_sin = self._tables_for(x.dtype)
        if not self.interleaved and cpu_token_ops.rope_applies(x, cos):  # one C++ call, the same arithmetic
            return cpu_token_ops.rope(x, cos, signed_sin)  # (B, H, T, D)
        rot, rest = x[..., : self.rot_dim], x[..., self.rot_dim :]
        if self.interleaved:
            rot = deinterleave(rot)
        rotated = rot * cos + torch.roll(rot, self.rot_dim // 2, dims=-1) * signed_sin  # (B, H, T, rot_dim)
        return rotated if rest.shape[-1] == 0 else torch.cat((rotated, rest), dim=-1)

    def __call__(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._apply(q), self._apply(k)

    def half_split(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The tables (B, 1, T, rot_dim) in ``dtype``; None for the interleaved (GPT-J) layout."""
        return None if self.interleaved else self._tables_for(dtype)


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, attention_factor: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (B, 1, T, 2·len(inv_freq)) in float32 for (B, T) positions."""
    freqs = positions[..., None].float() * inv_freq.float()  # (B, T, dim/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (B, T, dim)
    return (emb.cos() * attention_factor)[:, None], (emb.sin() * attention_factor)[:, None]

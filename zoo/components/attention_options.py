"""The options of softmax attention (``zoo.components.attention``): head counts and the
choices a checkpoint makes (biases, QK-norm, window, sinks, scale, output gate, clipping),
with MHA's and MQA's head-count rules; cross-attention takes the same ones."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field, PositiveInt, ValidationInfo, model_validator

from zoo.specs.options import Options, divisors_listed


class AttentionOptions(Options):
    tiny: ClassVar[Mapping[str, Any]] = {"n_heads": 4, "n_kv_heads": 2, "head_dim": 16}

    n_heads: PositiveInt
    n_kv_heads: PositiveInt | None = Field(None, description="key/value heads; default n_heads")
    head_dim: PositiveInt | None = Field(None, description="default d_model // n_heads")
    bias: bool = Field(False, description="bias on the q, k and v projections")
    out_bias: bool | None = Field(None, description="bias on the output projection; default = bias")
    qk_norm: bool = Field(False, description="norm (the model's norm kind) on each head of q and k")
    window: PositiveInt | None = Field(
        None, description="sliding window: keys with q - k < window; bidirectional: |q - k| <= window // 2"
    )
    sinks: bool = Field(False, description="a learned logit per head joined to the softmax (gpt-oss)")
    scale: float | None = Field(None, gt=0, description="score scale; default head_dim ** -0.5")
    causal: bool = Field(True, description="a token sees only earlier ones; false: bidirectional (encoders)")
    output_gate: bool = Field(
        False, description="q_proj also gives each head a gate; the output times sigmoid(gate) (Qwen3-Next)"
    )
    clip_qkv: float | None = Field(
        None, gt=0, description="clamp the q, k and v projections' outputs to [-clip_qkv, clip_qkv] (MPT, OLMo)"
    )

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        n_heads = data.get("n_heads")
        d_model = (info.context or {}).get("d_model")
        if data.get("head_dim") is None and isinstance(n_heads, int) and n_heads > 0 and isinstance(d_model, int):
            if d_model % n_heads:
                raise ValueError(
                    f"head_dim: not given and d_model={d_model} is not divisible by n_heads={n_heads}; "
                    "set head_dim explicitly"
                )
            data["head_dim"] = d_model // n_heads
        if data.get("n_kv_heads") is None:
            data["n_kv_heads"] = cls._default_kv_heads(n_heads)
        return data

    @classmethod
    def _default_kv_heads(cls, n_heads: Any) -> Any:
        return n_heads

    @model_validator(mode="after")
    def _check_heads(self) -> AttentionOptions:
        kv = self.n_kv_heads or self.n_heads
        if self.n_heads % kv:
            raise ValueError(
                f"n_kv_heads: n_heads={self.n_heads} is not divisible by n_kv_heads={kv}; "
                f"allowed: a divisor of n_heads{divisors_listed(self.n_heads)}"
            )
        return self

    @property
    def kv_heads(self) -> int:
        return int(self.n_kv_heads or self.n_heads)


class MHAOptions(AttentionOptions):
    """Multi-head attention: one key/value head per query head."""

    reset_on_kind_change: ClassVar[frozenset[str]] = frozenset({"n_kv_heads"})
    follows: ClassVar[Mapping[str, str]] = {"n_kv_heads": "n_heads"}  # setting n_heads carries it along
    tiny: ClassVar[Mapping[str, Any]] = {"n_heads": 4, "n_kv_heads": 4, "head_dim": 16}

    @model_validator(mode="after")
    def _one_kv_per_head(self) -> MHAOptions:
        if self.n_kv_heads != self.n_heads:
            raise ValueError(f"n_kv_heads: mha needs n_kv_heads == n_heads ({self.n_heads}), got {self.n_kv_heads}")
        return self


class MQAOptions(AttentionOptions):
    """Multi-query attention: one key/value head shared by all query heads."""

    reset_on_kind_change: ClassVar[frozenset[str]] = frozenset({"n_kv_heads"})
    tiny: ClassVar[Mapping[str, Any]] = {"n_heads": 4, "head_dim": 16}

    @classmethod
    def _default_kv_heads(cls, n_heads: Any) -> Any:
        return 1

    @model_validator(mode="after")
    def _single_kv(self) -> MQAOptions:
        if self.n_kv_heads != 1:
            raise ValueError(f"n_kv_heads: mqa needs n_kv_heads == 1, got {self.n_kv_heads}")
        return self

"""Reading Hugging Face config.json files: the key-ticking reader, activation names, RoPE
options, layer selectors. Shared by every checkpoint family (``zoo.hub.families.*``, the
shared ``zoo.hub.llama_like`` / ``bert_like`` / ``mamba_like`` helpers and plugins, through
``zoo.hub.family``); it imports no family."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.errors import CheckpointError, allowed, did_you_mean
from zoo.hub.config_keys import is_neutral

# the keys accepted unread: the rule and its lists live in zoo/hub/config_keys.py
ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}


class ConfigReader:
    """A config dict whose keys are ticked off as they are read; leftovers are errors."""

    def __init__(self, config: Mapping[str, Any], source: str) -> None:
        self.config = dict(config)
        self.source = source
        self.used: set[str] = set()

    def error(self, key: str, message: str) -> CheckpointError:
        return CheckpointError(f"{self.source}: {key}: {message}")

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        value = self.config.get(key)
        return default if value is None else value

    def need(self, key: str) -> Any:
        self.used.add(key)
        if self.config.get(key) is None:
            raise self.error(key, "required but missing")
        return self.config[key]

    def expect(self, key: str, allowed_values: tuple[Any, ...], why: str) -> None:
        """A key zoo supports with only these values (None = absent)."""
        self.used.add(key)
        value = self.config.get(key)
        if value not in allowed_values:
            raise self.error(
                key, f"{value!r} is not supported ({why}); allowed: {', '.join(map(repr, allowed_values))}"
            )

    def activation(self, key: str, default: str) -> str:
        name = self.get(key, default)
        if name not in ACTIVATIONS:
            raise self.error(key, f"activation {name!r} is not supported; allowed: {allowed(ACTIVATIONS)}")
        return ACTIVATIONS[name]

    def check_all_used(self) -> None:
        left = sorted(k for k in self.config if k not in self.used and not is_neutral(k))
        if left:
            raise self.error(
                left[0],
                f"unknown config key for model_type {self.config.get('model_type')!r}; zoo cannot "
                "tell whether it changes the computation, so it refuses to drop it",
            )


# ---- RoPE -----------------------------------------------------------------------------------
def rope_options(reader: ConfigReader, params: Mapping[str, Any] | None, key: str) -> dict[str, Any]:
    """positional options from a rope_parameters / rope_scaling dict (transformers 4 or 5)."""
    params = dict(params or {})
    theta = params.pop("rope_theta", None) or reader.get("rope_theta", 10000.0)
    rope_type = params.pop("rope_type", None) or params.pop("type", None) or "default"
    params.pop("type", None)
    partial = params.pop("partial_rotary_factor", None) or reader.get("partial_rotary_factor", 1.0)
    options: dict[str, Any] = {"kind": "rope", "theta": float(theta)}
    if partial != 1.0:
        options["partial_rotary_factor"] = float(partial)
    if rope_type == "default":
        if params:
            raise reader.error(f"{key}.{next(iter(params))}", "unexpected for rope_type 'default'")
        return options
    if rope_type not in ("linear", "llama3", "yarn"):
        raise reader.error(
            f"{key}.rope_type", f"{rope_type!r} is not supported; allowed: default, linear, llama3, yarn"
        )
    scaling: dict[str, Any] = {"type": rope_type}
    known = {
        "factor",
        "low_freq_factor",
        "high_freq_factor",
        "original_max_position_embeddings",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "attention_factor",
        "truncate",
    }
    for name, value in params.items():
        if name not in known:
            raise reader.error(
                f"{key}.{name}", f"unknown RoPE scaling field{did_you_mean(name, known)}; allowed: {allowed(known)}"
            )
        if value is not None:
            scaling[name] = value
    if rope_type in ("llama3", "yarn") and "original_max_position_embeddings" not in scaling:
        # transformers falls back to max_position_embeddings (yarn) when the field is absent
        scaling["original_max_position_embeddings"] = reader.need("max_position_embeddings")
    options["scaling"] = scaling
    return options


def rope_params(reader: ConfigReader) -> tuple[str, Mapping[str, Any] | None]:
    for key in ("rope_parameters", "rope_scaling"):
        if reader.config.get(key) is not None:
            reader.used.update({"rope_parameters", "rope_scaling"})
            return key, reader.config[key]
    reader.used.update({"rope_parameters", "rope_scaling"})
    return "rope_parameters", None


def layer_selector(indices: list[int], n_layers: int) -> str:
    """A compact selector for the layers: a slice 'a::p' when periodic, a union of slices
    with one period ('0::4,1::4,2::4') when that covers them exactly, else a list."""
    for start in range(n_layers):
        for step in range(1, n_layers + 1):
            if indices == list(range(start, n_layers, step)):
                return f"{start}::{step}"
    for step in range(2, n_layers):
        residues = sorted({i % step for i in indices})
        if indices == [i for i in range(n_layers) if i % step in residues]:
            return ",".join(f"{r}::{step}" for r in residues)
    return ",".join(map(str, indices))

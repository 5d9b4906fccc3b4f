"""The Hugging Face ``mamba2`` checkpoint family (transformers' Mamba2ForCausalLM): a stack
of Mamba2 mixers alone (no FFN)."""

from __future__ import annotations

import math
import re
from typing import Any

from zoo.errors import CheckpointError
from zoo.hub.config_reader import ConfigReader
from zoo.hub.llama_like import no_rules
from zoo.specs.model import ModelSpec

MODEL_TYPE = "mamba2"
ARCHITECTURE = "Mamba2ForCausalLM"
IGNORED = re.compile("$^")
RENAMES: list[tuple[str, str]] = [
    (r"embed\.weight", "backbone.embeddings.weight"),
    (r"final_norm\.weight", "backbone.norm_f.weight"),
    (r"lm_head\.weight", "lm_head.weight"),
    (r"layers\.(\d+)\.attn_norm\.weight", r"backbone.layers.\1.norm.weight"),
    (r"layers\.(\d+)\.attention\.(.+)", r"backbone.layers.\1.mixer.\2"),
]


def _json_float(value: Any) -> float:
    """A number, or transformers 5's encoding of a non-finite one: {"__float__": "Infinity"}."""
    return float(value["__float__"]) if isinstance(value, dict) and "__float__" in value else float(value)


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a mamba2 config.json."""
    d, heads, head_dim = r.need("hidden_size"), r.need("num_heads"), r.get("head_dim", 64)
    r.expect("hidden_act", (None, "silu"), "the Mamba2 convolution and gate are SiLU")
    r.expect("rms_norm", (None, True), "Mamba2 blocks use RMSNorm")
    r.expect("norm_before_gate", (None, False), "transformers' Mamba2 gates before its norm")
    inner = int(r.get("expand", 2) * d)
    if heads * head_dim != inner:
        raise r.error(
            "num_heads", f"num_heads * head_dim = {heads * head_dim} must equal expand * hidden_size = {inner}"
        )
    # init-only or informational: time_step_rank/min/max/floor, rescale_prenorm_residual;
    # residual_in_fp32 keeps the residual stream in float32 (no effect on a float32 model)
    r.used.update(
        {
            "time_step_rank",
            "time_step_min",
            "time_step_max",
            "time_step_floor",
            "rescale_prenorm_residual",
            "residual_in_fp32",
            "layer_types",
        }
    )
    low, high = (_json_float(v) for v in r.get("time_step_limit", (0.0, math.inf)))  # dt is clamped to this range
    eps = r.get("layer_norm_epsilon", 1e-5)
    mixer = {
        "kind": "mamba2",
        "n_heads": heads,
        "head_dim": head_dim,
        "n_groups": r.get("n_groups", 1),
        "state_size": r.get("state_size", 128),
        "conv_kernel": r.get("conv_kernel", 4),
        "chunk_size": r.get("chunk_size", 256),
        "bias": bool(r.get("use_bias", False)),
        "conv_bias": bool(r.get("use_conv_bias", True)),
        "eps": eps,
        "dt_min": float(low),
        "dt_max": None if math.isinf(high) else float(high),
    }
    return {
        "vocab_size": r.need("vocab_size"),
        "d_model": d,
        "n_layers": r.need("num_hidden_layers"),
        "max_seq_len": r.get("max_position_embeddings", 1048576),
        "tie_embeddings": bool(r.get("tie_word_embeddings", False)),
        "norm": {"kind": "rmsnorm", "eps": eps},
        "positional": {"kind": "none"},
        "attention": mixer,
        "ffn": {"kind": "none"},
        "block": {"kind": "pre_norm"},
    }


def _ratio(a: int, b: int) -> int | float:
    return a // b if a % b == 0 else a / b


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The mamba2 config.json computing what ``spec`` computes."""
    layer = spec.layer(0)
    mixer = layer.attention
    if any(other.attention.to_dict() != mixer.to_dict() for other in spec.layer_specs()) or mixer.kind != "mamba2":
        raise CheckpointError(f"spec {spec.name!r}: a mamba2 config needs the same mamba2 mixer in every layer")
    config: dict[str, Any] = {
        "model_type": "mamba2",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.d_model,
        "num_hidden_layers": spec.n_layers,
        "max_position_embeddings": spec.max_seq_len,
        "tie_word_embeddings": spec.tie_embeddings,
        "num_heads": mixer.options.n_heads,
        "head_dim": mixer.options.head_dim,
        "expand": _ratio(mixer.options.n_heads * mixer.options.head_dim, spec.d_model),
        "n_groups": mixer.options.n_groups,
        "state_size": mixer.options.state_size,
        "conv_kernel": mixer.options.conv_kernel,
        "chunk_size": mixer.options.chunk_size,
        "use_bias": mixer.options.bias,
        "use_conv_bias": mixer.options.conv_bias,
        "layer_norm_epsilon": layer.norm.options.eps,
        "hidden_act": "silu",
    }
    if (
        mixer.options.dt_min or mixer.options.dt_max is not None
    ):  # (0, inf) is the default; inf as transformers 5 writes it
        config["time_step_limit"] = [
            mixer.options.dt_min,
            {"__float__": "Infinity"} if mixer.options.dt_max is None else mixer.options.dt_max,
        ]
    return config


tensor_rules = no_rules(RENAMES)

"""Reading a config.json as given: a file, a folder holding one, or a dict, and the value
type of every key zoo reads checked before any family reads it, so a 0 head count, a list or
a string where a number belongs is one ``CheckpointError`` naming the key."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zoo.errors import CheckpointError
from zoo.files.safe_io import bounded_repr, inside, load_json, read_text

# What each numeric or structured key must hold (null = absent); checked before any family reads
# them, so a 0 head count, a list or a string where a number belongs is one error naming the key.
POSITIVE_INTS = frozenset(
    {
        "hidden_size",
        "num_attention_heads",
        "num_key_value_heads",
        "num_hidden_layers",
        "vocab_size",
        "max_position_embeddings",
        "intermediate_size",
        "head_dim",
        "n_embd",
        "n_head",
        "n_layer",
        "n_positions",
        "n_inner",
        "num_local_experts",
        "num_experts_per_tok",
        "num_experts",
        "experts_per_token",
        "moe_intermediate_size",
        "sliding_window",
        "decoder_sparse_step",
        "sliding_window_pattern",
        "_sliding_window_pattern",
        "initial_context_length",
    }
)
FINITE_NUMBERS = frozenset(
    {
        "rope_theta",
        "rms_norm_eps",
        "layer_norm_epsilon",
        "partial_rotary_factor",
        "rope_local_base_freq",
        "swiglu_limit",
        "swiglu_alpha",
        "query_pre_attn_scalar",
    }
)
BOOLEANS = frozenset(
    {
        "tie_word_embeddings",
        "attention_bias",
        "mlp_bias",
        "use_sliding_window",
        "norm_topk_prob",
        "scale_attn_weights",
        "scale_attn_by_inverse_layer_idx",
        "use_bidirectional_attention",
    }
)
STRINGS = frozenset({"model_type", "hidden_act", "activation_function", "hidden_activation"})
MAPPINGS = frozenset({"rope_parameters", "rope_scaling", "quantization_config"})


def read_hf_config(config: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The config dict and a name for messages (a file, a folder holding config.json, or a dict)."""
    if isinstance(config, Mapping):
        return dict(config), "config"

    path = Path(config)
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        raise CheckpointError(f"{path}: no such config file")
    real = inside(path.parent, path.name, CheckpointError, "config file")
    data = load_json(read_text(real, CheckpointError, "config file"), CheckpointError, str(path))
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data, str(path)


def check_value_types(data: Mapping[str, Any], source: str) -> None:
    """Every key zoo reads holds a value of its type (or null); else one CheckpointError."""
    for key, value in data.items():
        if value is None:
            continue
        problem = None
        if key in POSITIVE_INTS and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            problem = "expected a positive integer"
        elif key in FINITE_NUMBERS and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
        ):
            problem = "expected a finite number"
        elif key in BOOLEANS and not isinstance(value, bool):
            problem = "expected true or false"
        elif key in STRINGS and not isinstance(value, str):
            problem = "expected a string"
        elif key in MAPPINGS and not isinstance(value, Mapping):
            problem = "expected an object"
        elif key == "layer_types" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            problem = "expected a list of strings"
        elif key == "mlp_only_layers" and not (
            isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            problem = "expected a list of layer indices"
        if problem:
            raise CheckpointError(f"{source}: {key}: {problem}, got {bounded_repr(value, 60)}")

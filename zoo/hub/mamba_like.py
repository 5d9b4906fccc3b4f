"""What the ``mamba`` and ``falcon_mamba`` checkpoint families share: config.json both ways
and tensor names (each family module says whether it is Falcon's).

Both are a stack of blocks ``x + mixer(rmsnorm(x))`` with no FFN and no positions; Falcon-Mamba
adds weightless RMS norms on dt, B and C inside the mixer (``mixer_rms_eps``), which zoo's
``mamba`` kind has as ``bcdt_norm_eps``. Everything else is the same tensors under the same
names, checked against transformers' MambaMixer and FalconMambaMixer.
"""

from __future__ import annotations

import math
from typing import Any

from zoo.archs.mamba import MAMBA_CONTEXT
from zoo.hub.config_reader import ConfigReader
from zoo.hub.config_writer import require
from zoo.specs.model import ModelSpec

# keys that only steer initialisation, kernels or legacy duplicates checked below
MAMBA_NEUTRAL = (
    "time_step_scale",
    "time_step_min",
    "time_step_max",
    "time_step_init_scheme",
    "time_step_floor",
    "rescale_prenorm_residual",
    "use_mambapy",
    "use_falcon_mambapy",
    "use_associative_scan",
    "fused_add_norm",
    "pad_vocab_size_multiple",
    # residuals kept in float32 between blocks: the same numbers in float32, zoo keeps the
    # model's dtype (a difference of rounding only in half precision)
    "residual_in_fp32",
)

MAMBA_RENAMES: list[tuple[str, str]] = [
    (r"embed\.weight", "backbone.embeddings.weight"),
    (r"final_norm\.weight", "backbone.norm_f.weight"),
    (r"lm_head\.weight", "lm_head.weight"),
    (r"layers\.(\d+)\.attn_norm\.weight", r"backbone.layers.\1.norm.weight"),
    (
        r"layers\.(\d+)\.attention\.((?:in_proj|x_proj|dt_proj|out_proj|conv1d)\.(?:weight|bias)|A_log|D)",
        r"backbone.layers.\1.mixer.\2",
    ),
]


def read_mamba(r: ConfigReader, falcon: bool) -> dict[str, Any]:
    """The spec dict of a mamba (or falcon_mamba) config."""
    d = r.get("hidden_size") or r.need("d_model")
    n_layers = r.get("num_hidden_layers") or r.need("n_layer")
    expand = r.get("expand", 2)
    for key, value in (
        ("d_model", d),
        ("n_layer", n_layers),
        ("intermediate_size", expand * d),
        ("d_inner", expand * d),
    ):
        r.expect(key, (None, value), f"must agree with hidden_size={d}, num_hidden_layers={n_layers}, expand={expand}")
    r.expect("hidden_act", (None, "silu"), "Mamba's mixer uses SiLU")
    r.expect("rms_norm", (None, True), "zoo's Mamba blocks use RMSNorm")
    r.expect("ssm_cfg", (None, {}), "Mamba (v1) with default mixer options")
    r.used.update(MAMBA_NEUTRAL)
    rank = r.get("time_step_rank", "auto")
    mixer: dict[str, Any] = {
        "kind": "mamba",
        "d_state": r.get("state_size", 16),
        "d_conv": r.get("conv_kernel", 4),
        "expand": expand,
        "dt_rank": math.ceil(d / 16) if rank == "auto" else int(rank),
        "conv_bias": bool(r.get("use_conv_bias", True)),
        "bias": bool(r.get("use_bias", False)),
    }
    if falcon:
        mixer["bcdt_norm_eps"] = float(r.get("mixer_rms_eps", 1e-6))
    return {
        # transformers' Mamba has no context limit and ignores this key; zoo writes it when a
        # spec sets a limit, so that the limit survives a save and load
        "vocab_size": r.need("vocab_size"),
        "d_model": d,
        "n_layers": n_layers,
        "max_seq_len": r.get("max_position_embeddings", MAMBA_CONTEXT),
        "tie_embeddings": bool(r.get("tie_word_embeddings", True)),
        "norm": {"kind": "rmsnorm", "eps": r.get("layer_norm_epsilon", 1e-5)},
        "positional": {"kind": "none"},
        "attention": mixer,
        "ffn": {"kind": "none"},
        "block": {"kind": "pre_norm"},
    }


def write_mamba(spec: ModelSpec, model_type: str, falcon: bool) -> dict[str, Any]:
    """The mamba / falcon_mamba config.json computing what ``spec`` computes."""
    require(spec, model_type, attention=("mamba",), ffn=("none",), norm=("rmsnorm",))
    base = spec.layer(0)
    mixer = base.attention
    config: dict[str, Any] = {
        "model_type": model_type,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.d_model,
        "num_hidden_layers": spec.n_layers,
        "state_size": mixer.options.d_state,
        "conv_kernel": mixer.options.d_conv,
        "expand": mixer.options.expand,
        "intermediate_size": mixer.options.expand * spec.d_model,
        "time_step_rank": mixer.options.dt_rank or math.ceil(spec.d_model / 16),
        "use_bias": mixer.options.bias,
        "use_conv_bias": mixer.options.conv_bias,
        "hidden_act": "silu",
        "layer_norm_epsilon": base.norm.options.eps,
        "tie_word_embeddings": spec.tie_embeddings,
        "residual_in_fp32": True,
    }
    if falcon:
        config["mixer_rms_eps"] = mixer.options.bcdt_norm_eps
    if spec.max_seq_len != MAMBA_CONTEXT:
        config["max_position_embeddings"] = spec.max_seq_len
    return config

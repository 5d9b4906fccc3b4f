"""MPT checkpoints: config.json <-> ModelSpec and tensor names.

MPT (mosaicml/mpt-7b) is a pre-norm causal decoder without biases (``no_bias``): LayerNorms
without a bias, ALiBi (``alibi_bias_max``), a fused ``Wqkv`` ([q; k; v] rows) whose output
may be clamped (``clip_qkv``, zoo's attention option of that name), an exact-GELU MLP
4 * d_model wide, a final LayerNorm and a tied LM head.

transformers' MPT, the reference zoo matches, hard-codes parts of the original code's
options: the MLP is 4 * d_model wide whatever ``expansion_ratio`` says, ALiBi slopes use
``alibi_bias_max`` 8, attention is multi-head and always has ALiBi. A config asking for
anything else is refused (transformers would silently compute something other than the
original model). MPT's slopes equal BLOOM's for every head count (both extend Press et
al.'s power-of-two series the same way).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from zoo.errors import CheckpointError
from zoo.hub.config_keys import BASE_CHECKS, is_neutral
from zoo.hub.config_reader import ConfigReader
from zoo.hub.config_writer import require
from zoo.hub.names import Rule, split_rows
from zoo.specs.model import ModelSpec

MODEL_TYPE = "mpt"
ARCHITECTURE = "MptForCausalLM"
IGNORED = re.compile("$^")
# initialisation, kernels and training-only switches (embedding_fraction scales gradients, not values)
NEUTRAL = (
    "init_config",
    "init_device",
    "embedding_fraction",
    "verbose",
    "emb_pdrop",
    "learned_pos_emb",
    "tokenizer_name",
    "norm_type",
)
# attn_config: key -> (values transformers computes, why)
ATTN_CHECKS: dict[str, tuple[tuple[Any, ...], str]] = {
    "attn_type": (("multihead_attention",), "transformers' MPT is multi-head whatever attn_type says"),
    "prefix_lm": ((False, None), "prefix-LM masking is not implemented"),
    "qk_ln": ((False, None), "transformers' MPT has no QK LayerNorm"),
    "attn_uses_sequence_id": ((False, None), "sequence-id masking is not implemented"),
    "alibi": ((True, None), "transformers' MPT always uses ALiBi"),
    "alibi_bias_max": ((8, 8.0, None), "transformers' MPT builds its ALiBi slopes with 8"),
}
ATTN_NEUTRAL = ("attn_pdrop", "attn_impl")  # dropout; which kernel computes the same attention
NORM_TYPES = ("low_precision_layernorm", "layernorm")  # the same in float32; low precision is a kernel choice


def _attn_config(r: ConfigReader) -> dict[str, Any]:
    """attn_config, each key read or checked (an unknown key is an error naming it); as a
    nested transformers config it also carries the base-class keys (names, output flags)."""
    config = r.get("attn_config") or {}
    if not isinstance(config, dict):
        raise r.error("attn_config", f"expected an object, got {type(config).__name__}")
    for key, value in config.items():
        if key in BASE_CHECKS and value not in BASE_CHECKS[key][0]:
            raise r.error(f"attn_config.{key}", f"{value!r} is not supported ({BASE_CHECKS[key][1]})")
        if key in ATTN_CHECKS:
            allowed, why = ATTN_CHECKS[key]
            if value not in allowed:
                raise r.error(f"attn_config.{key}", f"{value!r} is not supported ({why}); allowed: {allowed!r}")
        elif key not in (*ATTN_NEUTRAL, "clip_qkv", "softmax_scale") and not (is_neutral(key) or key in BASE_CHECKS):
            raise r.error(f"attn_config.{key}", "unknown key; it may change the computation")
    return config


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of an mpt config.json."""
    r.used.update(NEUTRAL)
    if r.config.get("norm_type", "low_precision_layernorm") not in NORM_TYPES:
        raise r.error("norm_type", f"{r.config['norm_type']!r} is not supported; allowed: {', '.join(NORM_TYPES)}")
    attn = _attn_config(r)
    d, heads = r.need("d_model"), r.need("n_heads")
    if d % heads:
        raise r.error("n_heads", f"d_model {d} is not divisible by n_heads {heads}")
    r.expect("no_bias", (None, True), "transformers' MPT has no biases")
    r.expect("expansion_ratio", (None, 4), "transformers' MPT MLP is 4 * d_model wide")
    r.expect("logit_scale", (None,), "transformers' MPT does not scale logits")
    attention: dict[str, Any] = {"kind": "mha", "n_heads": heads, "head_dim": d // heads, "bias": False}
    if attn.get("clip_qkv") is not None:
        attention["clip_qkv"] = float(attn["clip_qkv"])
    if attn.get("softmax_scale") is not None:
        attention["scale"] = float(attn["softmax_scale"])
    return {
        "vocab_size": r.need("vocab_size"),
        "d_model": d,
        "n_layers": r.need("n_layers"),
        "max_seq_len": int(r.get("max_seq_len", 2048)),
        "tie_embeddings": bool(r.get("tie_word_embeddings", True)),
        "norm": {"kind": "layernorm", "eps": float(r.get("layer_norm_epsilon", 1e-5)), "bias": False},
        "positional": {"kind": "alibi", "max_bias": 8.0},
        "attention": attention,
        "ffn": {"kind": "mlp", "hidden": 4 * d, "activation": "gelu", "bias": False},
        "block": {"kind": "pre_norm"},
        "final_norm": True,
        "head": {"kind": "causal_lm"},
    }


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The mpt config.json computing what ``spec`` computes (checked by reading it back)."""
    require(spec, MODEL_TYPE, attention=("mha",), positional=("alibi",), ffn=("mlp",), norm=("layernorm",))
    base = spec.layer(0)
    att = base.attention
    if att.kind != "mha":
        raise CheckpointError(f"spec {spec.name!r}: attention.kind {att.kind!r}; an mpt config describes mha")
    attn_config: dict[str, Any] = {
        "attn_type": "multihead_attention",
        "alibi": True,
        "alibi_bias_max": 8,
        "clip_qkv": att.options.clip_qkv,
        "softmax_scale": att.options.scale,
        "prefix_lm": False,
        "qk_ln": False,
        "attn_uses_sequence_id": False,
    }
    return {
        "architectures": [ARCHITECTURE],
        "model_type": MODEL_TYPE,
        "vocab_size": spec.vocab_size,
        "d_model": spec.d_model,
        "n_layers": spec.n_layers,
        "n_heads": att.options.n_heads,
        "expansion_ratio": 4,
        "max_seq_len": spec.max_seq_len,
        "layer_norm_epsilon": base.norm.options.eps,
        "no_bias": True,
        "attn_config": attn_config,
        "tie_word_embeddings": spec.tie_embeddings,
        **dict.fromkeys(("pad_token_id", "bos_token_id", "eos_token_id")),
    }


def tensor_rules(zoo_names: Collection[str], hf_keys: Collection[str]) -> tuple[list[Rule], list[tuple[str, str]]]:
    """Wqkv split into q, k, v rows; the rest renamed. MptForCausalLM stores the stack
    under ``transformer.``; a bare MptModel without the prefix."""
    p = "transformer." if not hf_keys or any(k.startswith("transformer.") for k in hf_keys) else ""
    rules = []
    for name in sorted(zoo_names):
        match = re.fullmatch(r"layers\.(\d+)\.attention\.q_proj\.weight", name)
        if match:
            i = match.group(1)
            parts = tuple(f"layers.{i}.attention.{x}_proj.weight" for x in "qkv")
            rules.append(split_rows(parts, f"{p}blocks.{i}.attn.Wqkv.weight"))
    layer = rf"{p}blocks.\1"
    renames = [
        (r"embed\.weight", f"{p}wte.weight"),
        (r"layers\.(\d+)\.attn_norm\.weight", rf"{layer}.norm_1.weight"),
        (r"layers\.(\d+)\.attention\.o_proj\.weight", rf"{layer}.attn.out_proj.weight"),
        (r"layers\.(\d+)\.ffn_norm\.weight", rf"{layer}.norm_2.weight"),
        (r"layers\.(\d+)\.ffn\.up_proj\.weight", rf"{layer}.ffn.up_proj.weight"),
        (r"layers\.(\d+)\.ffn\.down_proj\.weight", rf"{layer}.ffn.down_proj.weight"),
        (r"final_norm\.weight", rf"{p}norm_f.weight"),
        (r"lm_head\.weight", "lm_head.weight"),  # untied only (a tied table is embed.weight)
    ]
    return rules, renames

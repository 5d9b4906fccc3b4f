"""BART checkpoints: config.json <-> ModelSpec and tensor names.

BART is a post-norm encoder-decoder with biases everywhere, exact GELU, learned positions
per stack read at ``position + 2`` (two unused rows from its fairseq origin), a LayerNorm
on each stack's embeddings (after the positions are added) and no final norm. The word
embeddings are shared by both stacks and the LM head, which adds ``final_logits_bias``
(a buffer in transformers, so not a parameter: bart-base has 139,420,416).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from typing import Any

import torch

from zoo.errors import CheckpointError
from zoo.hub.config_reader import ConfigReader
from zoo.hub.config_writer import require
from zoo.hub.names import Rule
from zoo.specs.model import ModelSpec

MODEL_TYPE = "bart"
ARCHITECTURE = "BartForConditionalGeneration"
# the stacks' copies of the shared table (transformers ties them to shared.weight)
IGNORED = re.compile(r"^(model\.)?(encoder|decoder)\.embed_tokens\.weight$")
NEUTRAL = (
    "dropout",
    "activation_dropout",
    "attention_dropout",
    "classifier_dropout",
    "classif_dropout",
    "encoder_layerdrop",
    "decoder_layerdrop",
    "init_std",
    "is_encoder_decoder",
    "is_decoder",
    "decoder_start_token_id",
    "forced_eos_token_id",
    "forced_bos_token_id",
    "num_hidden_layers",
    "gradient_checkpointing",
    "no_repeat_ngram_size",
    "num_beams",
    "early_stopping",
    "length_penalty",
    "max_length",
    "min_length",
    "num_labels",
    "normalize_embedding",
    "static_position_embeddings",
    "extra_pos_embeddings",
    "output_past",
)


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a bart config.json."""
    r.used.update(NEUTRAL)
    r.expect("normalize_before", (None, False), "BART's blocks are post-norm")
    r.expect("add_final_layer_norm", (None, False), "mBART-style final norms are not mapped")
    r.expect("add_bias_logits", (None, False), "a learned logits bias parameter")
    if r.config.get("normalize_embedding") is False:
        raise r.error("normalize_embedding", "False is not supported (BART normalises its embeddings)")
    d, table = r.need("d_model"), r.need("max_position_embeddings")
    dec_heads, enc_heads = r.need("decoder_attention_heads"), r.need("encoder_attention_heads")
    activation = r.activation("activation_function", "gelu")
    scale = math.sqrt(d) if r.get("scale_embedding", False) else None
    attention = {"kind": "mha", "n_heads": dec_heads, "head_dim": d // dec_heads, "bias": True}
    return {
        "vocab_size": r.need("vocab_size"),
        "d_model": d,
        "n_layers": r.need("decoder_layers"),
        "max_seq_len": table,
        "tie_embeddings": bool(r.get("tie_word_embeddings", True)),
        "embedding_scale": scale,
        "embedding": {"kind": "token", "norm": True},
        "norm": {"kind": "layernorm", "eps": 1e-5, "bias": True},
        "positional": {"kind": "learned", "max_positions": table + 2, "offset": 2},
        "attention": attention,
        "cross_attention": dict(attention),
        "ffn": {"kind": "mlp", "hidden": r.need("decoder_ffn_dim"), "activation": activation, "bias": True},
        "block": {"kind": "post_norm"},
        "final_norm": False,
        "head": {"kind": "causal_lm", "logits_bias": True},
        "encoder": {
            "n_layers": r.need("encoder_layers"),
            "attention": {"n_heads": enc_heads, "head_dim": d // enc_heads},  # bidirectional by its role
            "ffn": {"hidden": r.need("encoder_ffn_dim")},
            "final_norm": False,
        },
        "decoder_start_token_id": int(r.get("decoder_start_token_id", 2)),
    }


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The bart config.json computing what ``spec`` computes (checked by reading it back)."""
    encoder = spec.encoder_spec()
    if encoder is None or spec.encoder is None:
        raise CheckpointError(f"spec {spec.name!r}: a bart config describes an encoder-decoder")
    require(
        spec, MODEL_TYPE, attention=("mha", "gqa", "mqa"), norm=("layernorm",), positional=("learned",), ffn=("mlp",)
    )
    dec, enc = spec.layer(0), encoder.layer(0)
    return {
        "architectures": [ARCHITECTURE],
        "model_type": MODEL_TYPE,
        "vocab_size": spec.vocab_size,
        "d_model": spec.d_model,
        "decoder_layers": spec.n_layers,
        "encoder_layers": spec.encoder.n_layers,
        "decoder_attention_heads": dec.attention.options.n_heads,
        "encoder_attention_heads": enc.attention.options.n_heads,
        "decoder_ffn_dim": dec.ffn.options.hidden,
        "encoder_ffn_dim": enc.ffn.options.hidden,
        "activation_function": dec.ffn.options.activation,
        "max_position_embeddings": spec.max_seq_len,
        "scale_embedding": spec.embedding_scale is not None,
        "tie_word_embeddings": spec.tie_embeddings,
        "is_encoder_decoder": True,
        "decoder_start_token_id": spec.decoder_start_token_id,
        "forced_eos_token_id": None,
    }


def _stack_renames(z: str, h: str) -> list[tuple[str, str]]:
    layer = rf"{h}.layers.\1"
    return [
        (rf"{z}embed\.norm\.(weight|bias)", rf"{h}.layernorm_embedding.\1"),
        (rf"{z}positionals\.0\.weight", f"{h}.embed_positions.weight"),
        (rf"{z}layers\.(\d+)\.attention\.(q|k|v)_proj\.(weight|bias)", rf"{layer}.self_attn.\2_proj.\3"),
        (rf"{z}layers\.(\d+)\.attention\.o_proj\.(weight|bias)", rf"{layer}.self_attn.out_proj.\2"),
        (rf"{z}layers\.(\d+)\.attn_norm\.(weight|bias)", rf"{layer}.self_attn_layer_norm.\2"),
        (rf"{z}layers\.(\d+)\.cross_attention\.(q|k|v)_proj\.(weight|bias)", rf"{layer}.encoder_attn.\2_proj.\3"),
        (rf"{z}layers\.(\d+)\.cross_attention\.o_proj\.(weight|bias)", rf"{layer}.encoder_attn.out_proj.\2"),
        (rf"{z}layers\.(\d+)\.cross_norm\.(weight|bias)", rf"{layer}.encoder_attn_layer_norm.\2"),
        (rf"{z}layers\.(\d+)\.ffn\.up_proj\.(weight|bias)", rf"{layer}.fc1.\2"),
        (rf"{z}layers\.(\d+)\.ffn\.down_proj\.(weight|bias)", rf"{layer}.fc2.\2"),
        (rf"{z}layers\.(\d+)\.ffn_norm\.(weight|bias)", rf"{layer}.final_layer_norm.\2"),
    ]


def _zero(name: str) -> Rule:
    """A checkpoint without final_logits_bias (BartModel): the bias stays zero, as in transformers."""
    return Rule((name,), (), lambda d, s: [(d[0], torch.zeros_like(d[0]))], lambda z: [])


def tensor_rules(zoo_names: Collection[str], hf_keys: Collection[str]) -> tuple[list[Rule], list[tuple[str, str]]]:
    """BartForConditionalGeneration names (under ``model.``), or BartModel's (no prefix, no logits bias)."""
    p = "" if hf_keys and not any(k.startswith("model.") for k in hf_keys) else "model."
    rules = []
    if hf_keys and "final_logits_bias" not in hf_keys and "lm_head.final_logits_bias" in zoo_names:
        rules.append(_zero("lm_head.final_logits_bias"))
    renames = [
        (r"embed\.weight", f"{p}shared.weight"),
        (r"lm_head\.weight", "lm_head.weight"),
        (r"lm_head\.final_logits_bias", "final_logits_bias"),
    ]
    renames += _stack_renames(r"encoder\.", f"{p}encoder") + _stack_renames("", f"{p}decoder")
    return rules, renames

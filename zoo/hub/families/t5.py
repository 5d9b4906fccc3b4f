"""T5 checkpoints: config.json <-> ModelSpec and tensor names.

T5 is a pre-norm encoder-decoder with T5's RMS LayerNorm (zoo's ``rmsnorm``), no biases,
unscaled attention scores (``scale: 1``) and a learned relative position bias per stack
(``relative_buckets``: bidirectional in the encoder, causal buckets in the decoder) that
the first layer owns and every layer adds; cross-attention has none. The FFN is ReLU (T5)
or gated-gelu (v1.1: ``geglu``). The word embeddings are shared by both stacks and the LM
head; transformers scales the decoder output by ``d_model ** -0.5`` before a tied head
(``scale_decoder_outputs``: true unless the config says ``tie_word_embeddings: false``).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from zoo.errors import CheckpointError
from zoo.hub.config_reader import ConfigReader
from zoo.hub.config_writer import require
from zoo.hub.names import Rule
from zoo.specs.model import ModelSpec

MODEL_TYPE = "t5"
# the stacks' copies of the shared table (transformers ties them to shared.weight)
IGNORED = re.compile(r"^(encoder|decoder)\.embed_tokens\.weight$")
ARCHITECTURE = "T5ForConditionalGeneration"
NEUTRAL = (
    "dropout_rate",
    "initializer_factor",
    "classifier_dropout",
    "is_encoder_decoder",
    "is_decoder",
    "decoder_start_token_id",
    "n_positions",
    "output_past",
    "gradient_checkpointing",
    "dense_act_fn",
    "is_gated_act",
)
FFN = {
    "relu": {"kind": "mlp", "activation": "relu"},
    "gated-gelu": {"kind": "geglu"},
    "gelu": {"kind": "mlp", "activation": "gelu"},
    "gated-relu": {"kind": "gated", "activation": "relu"},
    "gated-silu": {"kind": "swiglu"},
}


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a t5 config.json."""
    r.used.update(NEUTRAL)
    d, heads, d_kv = r.need("d_model"), r.need("num_heads"), r.need("d_kv")
    proj = r.get("feed_forward_proj", "relu")
    if proj not in FFN:
        raise r.error("feed_forward_proj", f"{proj!r} is not supported; allowed: {', '.join(FFN)}")
    tie = r.get("tie_word_embeddings")
    scale_out = bool(r.get("scale_decoder_outputs", tie is not False))
    attention = {"kind": "mha", "n_heads": heads, "head_dim": d_kv, "bias": False, "scale": 1.0}
    layers = r.need("num_layers")
    return {
        "vocab_size": r.need("vocab_size"),
        "d_model": d,
        "n_layers": r.get("num_decoder_layers", layers),
        "max_seq_len": int(r.config.get("n_positions") or 512),
        "tie_embeddings": tie is not False,
        "embedding": {"kind": "token"},
        "norm": {"kind": "rmsnorm", "eps": float(r.get("layer_norm_epsilon", 1e-6))},
        "positional": {
            "kind": "relative_buckets",
            "num_buckets": r.get("relative_attention_num_buckets", 32),
            "max_distance": r.get("relative_attention_max_distance", 128),
        },
        "attention": attention,
        "cross_attention": dict(attention),
        "ffn": {**FFN[proj], "hidden": r.need("d_ff"), "bias": False},
        "block": {"kind": "pre_norm"},
        "final_norm": True,
        "head": {"kind": "causal_lm", "scale": d**-0.5 if scale_out else None},
        "encoder": {"n_layers": layers},  # bidirectional by its role in the build
        "decoder_start_token_id": int(r.get("decoder_start_token_id", r.config.get("pad_token_id") or 0)),
    }


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The t5 config.json computing what ``spec`` computes (checked by reading it back)."""
    encoder = spec.encoder
    if encoder is None:
        raise CheckpointError(f"spec {spec.name!r}: a t5 config describes an encoder-decoder")
    require(
        spec,
        MODEL_TYPE,
        attention=("mha", "gqa", "mqa"),
        norm=("rmsnorm",),
        positional=("relative_buckets",),
        ffn=("mlp", "geglu", "gated", "swiglu"),
    )
    base = spec.layer(0)
    att, ffn, positional = base.attention, base.ffn, base.positional
    activation = ffn.options.model_dump().get("activation")
    proj = next(
        (
            name
            for name, kind in FFN.items()
            if kind["kind"] == ffn.kind and kind.get("activation", activation) == activation
        ),
        None,
    )
    if proj is None:
        raise CheckpointError(f"ffn: {ffn.kind} ({activation}) has no t5 feed_forward_proj")
    return {
        "architectures": [ARCHITECTURE],
        "model_type": MODEL_TYPE,
        "vocab_size": spec.vocab_size,
        "d_model": spec.d_model,
        "d_kv": att.options.head_dim,
        "num_heads": att.options.n_heads,
        "d_ff": ffn.options.hidden,
        "num_layers": encoder.n_layers,
        "num_decoder_layers": spec.n_layers,
        "relative_attention_num_buckets": positional.options.num_buckets,
        "relative_attention_max_distance": positional.options.max_distance,
        "layer_norm_epsilon": base.norm.options.eps,
        "feed_forward_proj": proj,
        "tie_word_embeddings": spec.tie_embeddings,
        "scale_decoder_outputs": spec.part("head").options.scale is not None,
        "is_encoder_decoder": True,
        "n_positions": spec.max_seq_len,
        "decoder_start_token_id": spec.decoder_start_token_id,
    }


def _stack_renames(zoo_stack: str, hf_stack: str, cross: bool) -> list[tuple[str, str]]:
    ff = 2 if cross else 1
    z, h = zoo_stack, hf_stack
    renames = [
        (rf"{z}layers\.(\d+)\.attn_norm\.weight", rf"{h}.block.\1.layer.0.layer_norm.weight"),
        (rf"{z}layers\.(\d+)\.attention\.(q|k|v|o)_proj\.weight", rf"{h}.block.\1.layer.0.SelfAttention.\2.weight"),
        (rf"{z}layers\.(\d+)\.ffn_norm\.weight", rf"{h}.block.\1.layer.{ff}.layer_norm.weight"),
        (rf"{z}layers\.(\d+)\.ffn\.up_proj\.weight", rf"{h}.block.\1.layer.{ff}.DenseReluDense.wi.weight"),
        (rf"{z}layers\.(\d+)\.ffn\.down_proj\.weight", rf"{h}.block.\1.layer.{ff}.DenseReluDense.wo.weight"),
        (rf"{z}layers\.(\d+)\.ffn\.gate_proj\.weight", rf"{h}.block.\1.layer.{ff}.DenseReluDense.wi_0.weight"),
        (rf"{z}layers\.(\d+)\.ffn\.up_proj\.weight", rf"{h}.block.\1.layer.{ff}.DenseReluDense.wi_1.weight"),
        (rf"{z}positionals\.0\.weight", rf"{h}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
    ]
    if cross:
        renames += [
            (rf"{z}layers\.(\d+)\.cross_norm\.weight", rf"{h}.block.\1.layer.1.layer_norm.weight"),
            (
                rf"{z}layers\.(\d+)\.cross_attention\.(q|k|v|o)_proj\.weight",
                rf"{h}.block.\1.layer.1.EncDecAttention.\2.weight",
            ),
        ]
    return renames


def tensor_rules(zoo_names: Collection[str], hf_keys: Collection[str]) -> tuple[list[Rule], list[tuple[str, str]]]:
    """Renames only; a gated FFN's up_proj is wi_1 (the plain one's is wi)."""
    gated = any(".ffn.gate_proj." in name for name in zoo_names)
    renames = [
        (r"embed\.weight", "shared.weight"),
        (r"lm_head\.weight", "lm_head.weight"),
        (r"final_norm\.weight", "decoder.final_layer_norm.weight"),
        (r"encoder\.final_norm\.weight", "encoder.final_layer_norm.weight"),
    ]
    for zoo_stack, hf_stack, cross in ((r"encoder\.", "encoder", False), ("", "decoder", True)):
        stack = _stack_renames(zoo_stack, hf_stack, cross)
        renames += [
            (p, t) for p, t in stack if not (gated and t.endswith(".wi.weight")) and not (not gated and "wi_" in t)
        ]
    return [], renames

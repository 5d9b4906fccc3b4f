"""The Hugging Face ``rwkv`` checkpoint family (transformers' ``RwkvForCausalLM``, RWKV-4),
registered through ``zoo_register_checkpoint_formats``: config.json both ways and the
tensor names. The module itself is the ``zoo.hub.family.CheckpointFamily``.

transformers' layout: ``rwkv.embeddings``, ``rwkv.blocks.N.{pre_ln (N = 0 only), ln1, ln2,
attention.*, feed_forward.*}``, ``rwkv.ln_out``, ``head``. zoo's: ``embed`` (with the
embedding norm = ``pre_ln``), ``layers.N.{ln1, ln2, attention.*, ffn.*}``, ``final_norm``,
``lm_head``. Every tensor keeps its shape, so the map is renames only.

``context_length`` is the longest chunk transformers' CUDA kernel takes (the recurrence
itself has no limit); zoo reads it as ``max_seq_len``, the cache's default length.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from zoo.errors import CheckpointError
from zoo.hub.family import ConfigReader

if TYPE_CHECKING:
    from zoo import ModelSpec

MODEL_TYPE = "rwkv"
ARCHITECTURE = "RwkvForCausalLM"
LN_EPS = 1e-5  # transformers' ln_out is nn.LayerNorm(hidden_size): eps 1e-5 whatever the config says
# the head of a tied checkpoint repeats the embedding table
IGNORED = re.compile(r"^head\.weight$")

RENAMES: list[tuple[str, str]] = [
    (r"embed\.weight", "rwkv.embeddings.weight"),
    (r"embed\.norm\.(weight|bias)", r"rwkv.blocks.0.pre_ln.\1"),
    (r"layers\.(\d+)\.(ln1|ln2)\.(weight|bias)", r"rwkv.blocks.\1.\2.\3"),
    (
        r"layers\.(\d+)\.attention\.(time_decay|time_first|time_mix_(?:key|value|receptance))",
        r"rwkv.blocks.\1.attention.\2",
    ),
    (r"layers\.(\d+)\.attention\.(key|value|receptance|output)\.weight", r"rwkv.blocks.\1.attention.\2.weight"),
    (r"layers\.(\d+)\.ffn\.(time_mix_(?:key|receptance))", r"rwkv.blocks.\1.feed_forward.\2"),
    (r"layers\.(\d+)\.ffn\.(key|value|receptance)\.weight", r"rwkv.blocks.\1.feed_forward.\2.weight"),
    (r"final_norm\.(weight|bias)", r"rwkv.ln_out.\1"),
    (r"lm_head\.weight", "head.weight"),
]


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of an rwkv config.json."""
    d = r.need("hidden_size")
    r.expect(
        "layer_norm_epsilon",
        (None, LN_EPS, 1e-05),
        "transformers' final ln_out always uses eps 1e-5 and zoo's final norm shares the model's norm",
    )
    r.used.add("use_cache")
    return {
        "vocab_size": r.need("vocab_size"),
        "d_model": d,
        "n_layers": r.need("num_hidden_layers"),
        "max_seq_len": r.get("context_length", 1024),
        "tie_embeddings": bool(r.get("tie_word_embeddings", False)),
        "embedding": {"kind": "token", "norm": True},  # blocks.0.pre_ln
        "norm": {"kind": "layernorm", "eps": LN_EPS, "bias": True},
        "positional": {"kind": "none"},
        "attention": {"kind": "rwkv", "attention_hidden": r.get("attention_hidden_size") or d},
        "ffn": {"kind": "rwkv", "hidden": r.get("intermediate_size") or 4 * d},
        "block": {"kind": "rwkv", "rescale_every": r.get("rescale_every", 6)},
        "final_norm": True,
    }


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The rwkv config.json computing what ``spec`` computes (zoo reads it back to check)."""
    layers = spec.layer_specs()
    base = layers[0]
    for layer in layers:
        if (layer.attention.kind, layer.ffn.kind, layer.block.kind) != ("rwkv", "rwkv", "rwkv"):
            raise CheckpointError(
                f"spec {spec.name!r}: layer {layer.index} is not an RWKV block; an rwkv config holds RWKV blocks only"
            )
    return {
        "model_type": MODEL_TYPE,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.d_model,
        "num_hidden_layers": spec.n_layers,
        "attention_hidden_size": base.attention.options.attention_hidden,
        "intermediate_size": base.ffn.options.hidden,
        "context_length": spec.max_seq_len,
        "layer_norm_epsilon": base.norm.options.eps,
        "rescale_every": base.block.options.rescale_every,
        "tie_word_embeddings": spec.tie_embeddings,
        "bos_token_id": None,
        "eos_token_id": None,  # the tokenizer's, not the spec's
    }


def tensor_rules(zoo_names: Collection[str], hf_keys: Collection[str]) -> tuple[list[Any], list[tuple[str, str]]]:
    """Renames only: every RWKV tensor has the same shape in both layouts."""
    return [], RENAMES

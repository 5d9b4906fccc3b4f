"""What the BERT-like checkpoint families (``bert``, ``roberta``) share: post-norm
bidirectional encoders with learned positions and token types, read and written here; each
family module states its root name, head names and position offset.

The head follows ``architectures``: ``*ForMaskedLM`` / ``*ForPreTraining`` is the masked-LM
head, anything else BertModel's pooler. Tensors sit at the top (BertModel) or under
``bert.`` / ``roberta.`` with the prediction head beside them.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from zoo.errors import CheckpointError
from zoo.hub.config_reader import ConfigReader
from zoo.hub.config_writer import require
from zoo.specs.model import ModelSpec


@dataclass(frozen=True)
class BertLayout:
    """Where one BERT-like family puts its tensors and what it names its architectures."""

    root: str  # "bert": tensors under bert. in the *ForMaskedLM checkpoints
    head: str  # the masked-LM head's prefix
    dense: str  # the head's transform, under ``head``
    norm: str
    base_architecture: str  # BertModel
    masked_architecture: str  # BertForMaskedLM
    position_offset: bool  # RoBERTa numbers real tokens from pad_token_id + 1


def read_bert_like(r: ConfigReader, layout: BertLayout) -> dict[str, Any]:
    """The spec dict of a BERT-like config.json."""
    r.expect("position_embedding_type", (None, "absolute"), "relative position embeddings are not implemented")
    r.expect("is_decoder", (None, False), "zoo's bert is the encoder; a causal BERT is a decoder spec")
    d, heads = r.need("hidden_size"), r.need("num_attention_heads")
    table = r.need("max_position_embeddings")
    positional: dict[str, Any] = {"kind": "learned"}  # the table: max_seq_len + offset rows, its default
    max_seq_len = table
    if layout.position_offset:
        offset = int(r.config.get("pad_token_id") if r.config.get("pad_token_id") is not None else 1) + 1
        positional.update(offset=offset, count_tokens=True)
        max_seq_len = table - offset
    masked = any(str(a).endswith(("ForMaskedLM", "ForPreTraining")) for a in r.get("architectures", []))
    activation = r.activation("hidden_act", "gelu")
    return {
        "vocab_size": r.need("vocab_size"),
        "d_model": d,
        "n_layers": r.need("num_hidden_layers"),
        "max_seq_len": max_seq_len,
        "tie_embeddings": bool(r.get("tie_word_embeddings", True)),
        "norm": {"kind": "layernorm", "eps": r.get("layer_norm_eps", 1e-12), "bias": True},
        "positional": positional,
        "attention": {"kind": "mha", "n_heads": heads, "head_dim": d // heads, "bias": True, "causal": False},
        "ffn": {"kind": "mlp", "hidden": r.need("intermediate_size"), "activation": activation, "bias": True},
        "block": {"kind": "post_norm"},
        "embedding": {"kind": "token", "type_vocab_size": r.get("type_vocab_size", 2), "norm": True},
        "head": {"kind": "masked_lm", "activation": activation} if masked else {"kind": "pooler"},
        "final_norm": False,
    }


def write_bert_like(spec: ModelSpec, model_type: str, layout: BertLayout) -> dict[str, Any]:
    """The config.json (``architectures`` by the head) computing what ``spec`` computes."""
    require(
        spec,
        model_type,
        attention=("mha", "gqa", "mqa"),
        ffn=("mlp",),
        norm=("layernorm",),
        positional=("learned",),
        block=("post_norm",),
    )
    base = spec.layer(0)
    att, ffn, norm, positional = base.attention, base.ffn, base.norm, base.positional
    embedding = spec.part("embedding")
    if embedding.kind != "token":
        raise CheckpointError(
            f"spec {spec.name!r}: embedding.kind {embedding.kind!r} has no {model_type} config; allowed: token"
        )
    masked = spec.part("head").kind == "masked_lm"
    config: dict[str, Any] = {
        "architectures": [layout.masked_architecture if masked else layout.base_architecture],
        "model_type": model_type,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.d_model,
        "num_hidden_layers": spec.n_layers,
        "num_attention_heads": att.options.n_heads,
        "intermediate_size": ffn.options.hidden,
        "hidden_act": ffn.options.activation,
        "max_position_embeddings": positional.options.max_positions or spec.max_seq_len + positional.options.offset,
        "type_vocab_size": embedding.options.type_vocab_size,
        "layer_norm_eps": norm.options.eps,
        "tie_word_embeddings": spec.tie_embeddings,
        "position_embedding_type": "absolute",
    }
    if layout.position_offset:
        config["pad_token_id"] = positional.options.offset - 1
    return config


def bert_renames(zoo_names: Collection[str], hf_keys: Collection[str], layout: BertLayout) -> list[tuple[str, str]]:
    """BertModel names (prefix-less, pooler) or *ForMaskedLM names under the root prefix."""
    masked = "lm_head.bias" in zoo_names
    prefixed = any(k.startswith(f"{layout.root}.") for k in hf_keys) if hf_keys else masked
    p = f"{layout.root}." if prefixed else ""
    layer = rf"{p}encoder.layer.\1"
    renames = [
        (r"embed\.weight", f"{p}embeddings.word_embeddings.weight"),
        (r"positionals\.0\.weight", f"{p}embeddings.position_embeddings.weight"),
        (r"embed\.token_type\.weight", f"{p}embeddings.token_type_embeddings.weight"),
        (r"embed\.norm\.(weight|bias)", rf"{p}embeddings.LayerNorm.\1"),
        (r"layers\.(\d+)\.attention\.q_proj\.(weight|bias)", rf"{layer}.attention.self.query.\2"),
        (r"layers\.(\d+)\.attention\.k_proj\.(weight|bias)", rf"{layer}.attention.self.key.\2"),
        (r"layers\.(\d+)\.attention\.v_proj\.(weight|bias)", rf"{layer}.attention.self.value.\2"),
        (r"layers\.(\d+)\.attention\.o_proj\.(weight|bias)", rf"{layer}.attention.output.dense.\2"),
        (r"layers\.(\d+)\.attn_norm\.(weight|bias)", rf"{layer}.attention.output.LayerNorm.\2"),
        (r"layers\.(\d+)\.ffn\.up_proj\.(weight|bias)", rf"{layer}.intermediate.dense.\2"),
        (r"layers\.(\d+)\.ffn\.down_proj\.(weight|bias)", rf"{layer}.output.dense.\2"),
        (r"layers\.(\d+)\.ffn_norm\.(weight|bias)", rf"{layer}.output.LayerNorm.\2"),
    ]
    if not masked:
        return renames + [(r"lm_head\.dense\.(weight|bias)", rf"{p}pooler.dense.\1")]
    return renames + [
        (r"lm_head\.dense\.(weight|bias)", rf"{layout.head}.{layout.dense}.\1"),
        (r"lm_head\.norm\.(weight|bias)", rf"{layout.head}.{layout.norm}.\1"),
        (r"lm_head\.bias", f"{layout.head}.bias"),
        (r"lm_head\.weight", f"{layout.head}.decoder.weight"),  # untied only (a tied table is embed.weight)
    ]


# checkpoint tensors zoo's model does not hold: BERT's next-sentence head, a pooler beside a
# masked-LM head, the tied decoder (a copy of the embedding and its bias), stored position /
# token-type id buffers
BERT_IGNORED = re.compile(
    r"^(cls\.seq_relationship\..*|(bert\.|roberta\.)?pooler\..*|cls\.predictions\.decoder\.(weight|bias)"
    r"|lm_head\.decoder\.(weight|bias)|.*embeddings\.(position_ids|token_type_ids))$"
)

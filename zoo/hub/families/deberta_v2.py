"""DeBERTa-v2 / v3 checkpoints (model_type ``deberta-v2``): config.json <-> ModelSpec and tensor names.

A post-norm bidirectional encoder (BERT's layout) whose attention is disentangled
(``zoo.components.disentangled_attention``): one relative-position table per encoder
(``encoder.rel_embeddings``, LayerNormed by ``encoder.LayerNorm`` when ``norm_rel_ebd``
says ``layer_norm``), log buckets (``position_buckets``, ``max_relative_positions``),
position projections shared with the content ones (``share_att_key``) or their own, the
terms of ``pos_att_type``. v3 adds no absolute position embeddings
(``position_biased_input: false``). DebertaV2ForMaskedLM's head is BERT's (dense, GELU,
LayerNorm, tied decoder with a bias), stored as ``cls.predictions.*`` (``legacy``, the
default) or ``lm_predictions.lm_head.*``. The convolution of v2-xlarge
(``conv_kernel_size``) is not implemented and refused.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from zoo.errors import CheckpointError
from zoo.hub.config_reader import ConfigReader
from zoo.hub.names import Rule
from zoo.specs.model import ModelSpec

MODEL_TYPE = "deberta-v2"
ARCHITECTURE = "DebertaV2Model"
ARCHITECTURES = {"masked_lm": "DebertaV2ForMaskedLM", "none": "DebertaV2Model"}
# the tied decoder's copies, the pre-training heads transformers also drops, stored id buffers
IGNORED = re.compile(
    r"^(cls\.predictions\.decoder\.(weight|bias)|mask_predictions\..*|lm_predictions\.lm_head\.decoder\..*"
    r"|(deberta\.)?embeddings\.position_ids)$"
)
# pooler keys feed only classification heads; conv_* only a convolution (refused when present)
NEUTRAL = (
    "pooler_hidden_size",
    "pooler_dropout",
    "pooler_hidden_act",
    "pooler_mode",
    "conv_act",
    "conv_groups",
    "legacy",
    "z_steps",
)


def _terms(r: ConfigReader) -> list[str]:
    raw = r.get("pos_att_type") or []
    terms = [t.strip() for t in raw.lower().split("|")] if isinstance(raw, str) else [str(t) for t in raw]
    terms = [t for t in terms if t]
    if not terms or not set(terms) <= {"c2p", "p2c"}:
        raise r.error("pos_att_type", f"{raw!r} is not supported; allowed: c2p, p2c or both (p2c|c2p)")
    return terms


def _positional(r: ConfigReader) -> dict[str, Any]:
    r.expect("relative_attention", (True,), "zoo's DeBERTa attention is relative (disentangled)")
    norms = [x.strip() for x in str(r.get("norm_rel_ebd", "none")).lower().split("|")]
    if not set(norms) <= {"none", "layer_norm"}:
        raise r.error("norm_rel_ebd", f"{r.config['norm_rel_ebd']!r} is not supported; allowed: none, layer_norm")
    max_relative = int(r.get("max_relative_positions", -1))
    return {
        "kind": "disentangled",
        "position_buckets": max(int(r.get("position_buckets", -1)), 0),
        "max_relative_positions": max_relative if max_relative >= 1 else None,
        "norm": "layer_norm" in norms,
        "absolute": bool(r.get("position_biased_input", True)),
    }


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a deberta-v2 config.json."""
    r.used.update(NEUTRAL)
    d, heads = r.need("hidden_size"), r.need("num_attention_heads")
    r.expect("conv_kernel_size", (None, 0), "DeBERTa-v2's convolution layer is not implemented")
    r.expect("embedding_size", (None, d), "an embedding projection (embed_proj) is not implemented for deberta-v2")
    r.expect("attention_head_size", (None, d // heads), "heads are hidden_size / num_attention_heads wide")
    act = r.activation("hidden_act", "gelu")
    masked = any(str(a).endswith("ForMaskedLM") for a in r.get("architectures") or [])
    table = r.need("max_position_embeddings")
    return {
        "vocab_size": r.need("vocab_size"),
        "d_model": d,
        "n_layers": r.need("num_hidden_layers"),
        "max_seq_len": table,
        "tie_embeddings": bool(r.get("tie_word_embeddings", True)),
        "norm": {"kind": "layernorm", "eps": float(r.get("layer_norm_eps", 1e-7)), "bias": True},
        "positional": _positional(r),
        "attention": {
            "kind": "disentangled",
            "n_heads": heads,
            "head_dim": d // heads,
            "bias": True,
            "pos_att_type": _terms(r),
            "share_att_key": bool(r.get("share_att_key", False)),
        },
        "ffn": {"kind": "mlp", "hidden": r.need("intermediate_size"), "activation": act, "bias": True},
        "block": {"kind": "post_norm"},
        "embedding": {"kind": "token", "type_vocab_size": r.get("type_vocab_size", 0), "norm": True},
        "head": {"kind": "masked_lm", "activation": act} if masked else {"kind": "none"},
        "final_norm": False,
    }


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The deberta-v2 config.json computing what ``spec`` computes (checked by reading it back)."""
    head = spec.part("head")
    if spec.encoder is not None or head.kind not in ARCHITECTURES:
        raise CheckpointError(
            f"spec {spec.name!r}: a deberta-v2 config describes an encoder with head none or masked_lm"
        )
    base = spec.layer(0)
    att, ffn, pos = base.attention, base.ffn, base.positional
    if att.kind != "disentangled" or pos.kind != "disentangled":
        raise CheckpointError(f"spec {spec.name!r}: a deberta-v2 config describes disentangled attention and positions")
    return {
        "architectures": [ARCHITECTURES[head.kind]],
        "model_type": MODEL_TYPE,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.d_model,
        "num_hidden_layers": spec.n_layers,
        "num_attention_heads": att.options.n_heads,
        "intermediate_size": ffn.options.hidden,
        "hidden_act": ffn.options.activation,
        "max_position_embeddings": spec.max_seq_len,
        "type_vocab_size": spec.part("embedding").options.type_vocab_size,
        "layer_norm_eps": base.norm.options.eps,
        "relative_attention": True,
        "position_buckets": pos.options.position_buckets or -1,
        "max_relative_positions": pos.options.max_relative_positions or -1,
        "norm_rel_ebd": "layer_norm" if pos.options.norm else "none",
        "position_biased_input": pos.options.absolute,
        "pos_att_type": "|".join(att.options.pos_att_type),
        "share_att_key": att.options.share_att_key,
        "tie_word_embeddings": spec.tie_embeddings,
        "legacy": True,
        "pad_token_id": None,
    }


def tensor_rules(zoo_names: Collection[str], hf_keys: Collection[str]) -> tuple[list[Rule], list[tuple[str, str]]]:
    """Renames only. DebertaV2ForMaskedLM keeps the encoder under ``deberta.`` and its head
    as ``cls.predictions`` (legacy, what zoo writes) or ``lm_predictions.lm_head``."""
    masked = "lm_head.bias" in zoo_names
    p = "deberta." if masked else ""
    legacy = not any(k.startswith("lm_predictions.") for k in hf_keys)
    dense, norm, bias = (
        ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm", "cls.predictions.bias")
        if legacy
        else ("lm_predictions.lm_head.dense", "lm_predictions.lm_head.LayerNorm", "lm_predictions.lm_head.bias")
    )
    layer = rf"{p}encoder.layer.\1"
    return [], [
        (r"embed\.weight", f"{p}embeddings.word_embeddings.weight"),
        (r"positionals\.0\.absolute", f"{p}embeddings.position_embeddings.weight"),
        (r"embed\.token_type\.weight", f"{p}embeddings.token_type_embeddings.weight"),
        (r"embed\.norm\.(weight|bias)", rf"{p}embeddings.LayerNorm.\1"),
        (r"positionals\.0\.weight", f"{p}encoder.rel_embeddings.weight"),
        (r"positionals\.0\.norm\.(weight|bias)", rf"{p}encoder.LayerNorm.\1"),
        (r"layers\.(\d+)\.attention\.q_proj\.(weight|bias)", rf"{layer}.attention.self.query_proj.\2"),
        (r"layers\.(\d+)\.attention\.k_proj\.(weight|bias)", rf"{layer}.attention.self.key_proj.\2"),
        (r"layers\.(\d+)\.attention\.v_proj\.(weight|bias)", rf"{layer}.attention.self.value_proj.\2"),
        (r"layers\.(\d+)\.attention\.pos_(key|query)_proj\.(weight|bias)", rf"{layer}.attention.self.pos_\2_proj.\3"),
        (r"layers\.(\d+)\.attention\.o_proj\.(weight|bias)", rf"{layer}.attention.output.dense.\2"),
        (r"layers\.(\d+)\.attn_norm\.(weight|bias)", rf"{layer}.attention.output.LayerNorm.\2"),
        (r"layers\.(\d+)\.ffn\.up_proj\.(weight|bias)", rf"{layer}.intermediate.dense.\2"),
        (r"layers\.(\d+)\.ffn\.down_proj\.(weight|bias)", rf"{layer}.output.dense.\2"),
        (r"layers\.(\d+)\.ffn_norm\.(weight|bias)", rf"{layer}.output.LayerNorm.\2"),
        (r"lm_head\.dense\.(weight|bias)", rf"{dense}.\1"),
        (r"lm_head\.norm\.(weight|bias)", rf"{norm}.\1"),
        (r"lm_head\.bias", bias),
        (r"lm_head\.weight", "cls.predictions.decoder.weight"),  # untied only (a tied table is embed.weight)
    ]

"""ELECTRA checkpoints: config.json <-> ModelSpec and tensor names.

ELECTRA's discriminator (google/electra-base-discriminator) is BERT's post-norm encoder
with tables ``embedding_size`` wide: word + position + token-type embeddings and their
LayerNorm at that width, then ``embeddings_project`` (a Linear to hidden_size) where the
widths differ (zoo: ``embedding.dim``, ``positional.dim``). ElectraModel has no pooler;
ElectraForPreTraining adds the replaced-token-detection head (zoo's ``discriminator``).
The generator (ElectraForMaskedLM) is not read.
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

MODEL_TYPE = "electra"
ARCHITECTURE = "ElectraModel"
ARCHITECTURES = {"discriminator": "ElectraForPreTraining", "none": "ElectraModel"}
# stored position / token-type id buffers (no weights)
IGNORED = re.compile(r"^(electra\.)?embeddings\.(position_ids|token_type_ids)$")
NEUTRAL = ("summary_type", "summary_use_proj", "summary_activation", "summary_last_dropout", "classifier_dropout")


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of an electra config.json."""
    r.used.update(NEUTRAL)
    r.used.add("tie_word_embeddings")  # ties the generator's head; the discriminator has no tied weight
    r.expect("position_embedding_type", (None, "absolute"), "relative position embeddings are not implemented")
    architectures = [str(a) for a in r.get("architectures") or []]
    if any(a in ("ElectraForMaskedLM", "ElectraForCausalLM") for a in architectures):
        raise r.error(
            "architectures",
            f"{architectures}: zoo reads ELECTRA's discriminator "
            "(ElectraModel, ElectraForPreTraining), not the generator",
        )
    d, heads = r.need("hidden_size"), r.need("num_attention_heads")
    width = int(r.get("embedding_size", d))
    act = r.activation("hidden_act", "gelu")
    discriminator = "ElectraForPreTraining" in architectures
    return {
        "vocab_size": r.need("vocab_size"),
        "d_model": d,
        "n_layers": r.need("num_hidden_layers"),
        "max_seq_len": r.need("max_position_embeddings"),
        "tie_embeddings": False,
        "norm": {"kind": "layernorm", "eps": float(r.get("layer_norm_eps", 1e-12)), "bias": True},
        "positional": {"kind": "learned", "max_positions": r.need("max_position_embeddings"), "dim": width},
        "attention": {"kind": "mha", "n_heads": heads, "head_dim": d // heads, "bias": True, "causal": False},
        "ffn": {"kind": "mlp", "hidden": r.need("intermediate_size"), "activation": act, "bias": True},
        "block": {"kind": "post_norm"},
        "embedding": {"kind": "token", "type_vocab_size": r.get("type_vocab_size", 2), "norm": True, "dim": width},
        "head": {"kind": "discriminator", "activation": act} if discriminator else {"kind": "none"},
        "final_norm": False,
    }


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The electra config.json computing what ``spec`` computes (checked by reading it back)."""
    head = spec.part("head")
    if spec.encoder is not None or head.kind not in ARCHITECTURES:
        raise CheckpointError(
            f"spec {spec.name!r}: an electra config describes an encoder with head none or discriminator"
        )
    require(
        spec,
        MODEL_TYPE,
        attention=("mha", "gqa", "mqa"),
        ffn=("mlp",),
        norm=("layernorm",),
        positional=("learned",),
        block=("post_norm",),
    )
    base = spec.layer(0)
    att, ffn = base.attention, base.ffn
    return {
        "architectures": [ARCHITECTURES[head.kind]],
        "model_type": MODEL_TYPE,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.d_model,
        "embedding_size": spec.part("embedding").options.dim or spec.d_model,
        "num_hidden_layers": spec.n_layers,
        "num_attention_heads": att.options.n_heads,
        "intermediate_size": ffn.options.hidden,
        "hidden_act": ffn.options.activation,
        "max_position_embeddings": base.positional.options.max_positions or spec.max_seq_len,
        "type_vocab_size": spec.part("embedding").options.type_vocab_size,
        "layer_norm_eps": base.norm.options.eps,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": False,
        "pad_token_id": None,
    }


def tensor_rules(zoo_names: Collection[str], hf_keys: Collection[str]) -> tuple[list[Rule], list[tuple[str, str]]]:
    """Renames only: BERT's layer names; ElectraForPreTraining keeps the stack under ``electra.``."""
    discriminator = any(n.startswith("lm_head.dense_prediction.") for n in zoo_names)
    prefixed = any(k.startswith("electra.") for k in hf_keys) if hf_keys else discriminator
    p = "electra." if prefixed else ""
    layer = rf"{p}encoder.layer.\1"
    return [], [
        (r"embed\.weight", f"{p}embeddings.word_embeddings.weight"),
        (r"positionals\.0\.weight", f"{p}embeddings.position_embeddings.weight"),
        (r"embed\.token_type\.weight", f"{p}embeddings.token_type_embeddings.weight"),
        (r"embed\.norm\.(weight|bias)", rf"{p}embeddings.LayerNorm.\1"),
        (r"embed\.project\.(weight|bias)", rf"{p}embeddings_project.\1"),
        (r"layers\.(\d+)\.attention\.q_proj\.(weight|bias)", rf"{layer}.attention.self.query.\2"),
        (r"layers\.(\d+)\.attention\.k_proj\.(weight|bias)", rf"{layer}.attention.self.key.\2"),
        (r"layers\.(\d+)\.attention\.v_proj\.(weight|bias)", rf"{layer}.attention.self.value.\2"),
        (r"layers\.(\d+)\.attention\.o_proj\.(weight|bias)", rf"{layer}.attention.output.dense.\2"),
        (r"layers\.(\d+)\.attn_norm\.(weight|bias)", rf"{layer}.attention.output.LayerNorm.\2"),
        (r"layers\.(\d+)\.ffn\.up_proj\.(weight|bias)", rf"{layer}.intermediate.dense.\2"),
        (r"layers\.(\d+)\.ffn\.down_proj\.(weight|bias)", rf"{layer}.output.dense.\2"),
        (r"layers\.(\d+)\.ffn_norm\.(weight|bias)", rf"{layer}.output.LayerNorm.\2"),
        (r"lm_head\.(dense|dense_prediction)\.(weight|bias)", r"discriminator_predictions.\1.\2"),
    ]

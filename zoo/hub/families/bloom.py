"""BLOOM checkpoints: config.json <-> ModelSpec and tensor names.

BLOOM (bigscience/bloom-560m ... bloom) is a pre-norm causal decoder with biases
everywhere: a LayerNorm right after the word embeddings (``word_embeddings_layernorm``),
ALiBi instead of position embeddings (slopes as Press et al. extend them to head counts
that are not a power of two, which zoo's ``alibi`` computes), a fused ``query_key_value``
whose rows are laid out head by head ([n_heads, 3, head_dim]: q, k, v of head 0, then of
head 1, ...), a tanh-GELU MLP of width 4 * hidden, a final LayerNorm and a tied LM head.

transformers numbers ALiBi keys by counting real tokens; zoo biases by cache slot. Both
add slope * (key - constant) to a query's row, and softmax ignores a per-row constant.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

import torch

from zoo.errors import CheckpointError
from zoo.hub.config_reader import ConfigReader
from zoo.hub.config_writer import require
from zoo.hub.family import ZooShapes
from zoo.hub.names import Pairs, Rule
from zoo.specs.model import ModelSpec

MODEL_TYPE = "bloom"
ARCHITECTURE = "BloomForCausalLM"
IGNORED = re.compile("$^")
# keys of fused kernels, tensor-parallel training and initialisation: the same forward either way
NEUTRAL = (
    "attention_softmax_in_fp32",
    "bias_dropout_fusion",
    "masked_softmax_fusion",
    "skip_bias_add",
    "skip_bias_add_qkv",
    "offset_alibi",
    "slow_but_exact",
    "hidden_dropout",
    "seq_length",
)
DEFAULT_CONTEXT = 2048  # BLOOM's training length; ALiBi itself has no table to bound it


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a bloom config.json."""
    r.used.update(NEUTRAL)
    r.expect("apply_residual_connection_post_layernorm", (None, False), "zoo's BLOOM adds the residual before the norm")
    d = r.get("hidden_size") or r.need("n_embed")
    r.used.add("n_embed")
    heads = r.need("n_head")
    if d % heads:
        raise r.error("n_head", f"hidden_size {d} is not divisible by n_head {heads}")
    r.expect("n_inner", (None, 4 * d), "transformers' BLOOM MLP is 4 * hidden_size wide whatever n_inner says")
    return {
        "vocab_size": r.need("vocab_size"),
        "d_model": d,
        "n_layers": r.need("n_layer"),
        "max_seq_len": int(r.config.get("seq_length") or DEFAULT_CONTEXT),
        "tie_embeddings": bool(r.get("tie_word_embeddings", True)),
        "embedding": {"kind": "token", "norm": True},
        "norm": {"kind": "layernorm", "eps": float(r.get("layer_norm_epsilon", 1e-5)), "bias": True},
        "positional": {"kind": "alibi", "max_bias": 8.0},
        "attention": {"kind": "mha", "n_heads": heads, "head_dim": d // heads, "bias": True},
        "ffn": {"kind": "mlp", "hidden": 4 * d, "activation": "gelu_tanh", "bias": True},
        "block": {"kind": "pre_norm"},
        "final_norm": True,
        "head": {"kind": "causal_lm"},
    }


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The bloom config.json computing what ``spec`` computes (checked by reading it back)."""
    require(spec, MODEL_TYPE, attention=("mha",), positional=("alibi",), ffn=("mlp",), norm=("layernorm",))
    att = spec.layer(0).attention
    return {
        "architectures": [ARCHITECTURE],
        "model_type": MODEL_TYPE,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.d_model,
        "n_layer": spec.n_layers,
        "n_head": att.options.n_heads,
        "layer_norm_epsilon": spec.layer(0).norm.options.eps,
        "apply_residual_connection_post_layernorm": False,
        "seq_length": spec.max_seq_len,
        "tie_word_embeddings": spec.tie_embeddings,
        **dict.fromkeys(("pad_token_id", "bos_token_id", "eos_token_id")),
    }


def per_head_qkv(zoo: tuple[str, str, str], hf: str, heads: int) -> Rule:
    """BLOOM's query_key_value: rows [heads, 3, head_dim] (q, k, v of each head in turn)
    <-> zoo's q_proj, k_proj, v_proj (rows [heads, head_dim] each); weights and biases."""

    def load(d: list[torch.Tensor], s: list[torch.Tensor]) -> Pairs:
        src = s[0]  # (3 * H * D, d) or (3 * H * D,)
        if src.shape[0] != sum(t.shape[0] for t in d) or src.shape[0] % (3 * heads):
            return [(torch.cat(d), src)]  # shape mismatch, reported by the loader
        grouped = src.view(heads, 3, -1, *src.shape[1:])  # (H, 3, D, ...)
        return [(t.view(heads, -1, *t.shape[1:]), grouped[:, i]) for i, t in enumerate(d)]

    def save(z: list[torch.Tensor]) -> list[torch.Tensor]:
        per_head = [t.reshape(heads, -1, *t.shape[1:]) for t in z]  # 3 x (H, D, ...)
        return [torch.stack(per_head, dim=1).reshape(-1, *z[0].shape[1:])]  # (H * 3 * D, ...)

    return Rule(zoo, (hf,), load, save)


def tensor_rules(zoo_names: Collection[str], hf_keys: Collection[str]) -> tuple[list[Rule], list[tuple[str, str]]]:
    """query_key_value split head by head; the rest renamed. BloomForCausalLM stores the
    stack under ``transformer.``; a bare BloomModel without the prefix."""
    if not isinstance(zoo_names, ZooShapes):
        raise CheckpointError("bloom: query_key_value splits by head count; tensor_rules needs ZooShapes with the spec")
    spec = zoo_names.spec
    p = "transformer." if not hf_keys or any(k.startswith("transformer.") for k in hf_keys) else ""
    rules = []
    for name in sorted(zoo_names):
        match = re.fullmatch(r"layers\.(\d+)\.attention\.q_proj\.(weight|bias)", name)
        if match:
            i, kind = match.groups()
            heads = spec.layer(int(i)).attention.options.n_heads
            parts = tuple(f"layers.{i}.attention.{x}_proj.{kind}" for x in "qkv")
            rules.append(per_head_qkv(parts, f"{p}h.{i}.self_attention.query_key_value.{kind}", heads))  # type: ignore[arg-type]
    layer = rf"{p}h.\1"
    renames = [
        (r"embed\.weight", f"{p}word_embeddings.weight"),
        (r"embed\.norm\.(weight|bias)", rf"{p}word_embeddings_layernorm.\1"),
        (r"layers\.(\d+)\.attn_norm\.(weight|bias)", rf"{layer}.input_layernorm.\2"),
        (r"layers\.(\d+)\.attention\.o_proj\.(weight|bias)", rf"{layer}.self_attention.dense.\2"),
        (r"layers\.(\d+)\.ffn_norm\.(weight|bias)", rf"{layer}.post_attention_layernorm.\2"),
        (r"layers\.(\d+)\.ffn\.up_proj\.(weight|bias)", rf"{layer}.mlp.dense_h_to_4h.\2"),
        (r"layers\.(\d+)\.ffn\.down_proj\.(weight|bias)", rf"{layer}.mlp.dense_4h_to_h.\2"),
        (r"final_norm\.(weight|bias)", rf"{p}ln_f.\1"),
        (r"lm_head\.weight", "lm_head.weight"),  # untied only (a tied table is embed.weight)
    ]
    return rules, renames

"""The Hugging Face ``gpt2`` checkpoint family (transformers' GPT2LMHeadModel).

Pre-norm LayerNorm blocks with biases, learned positions, GELU (tanh) MLP. Its Conv1D layers
store (in, out), so zoo's (out, in) weights are transposed, and ``c_attn`` holds q, k and v
fused. Tensors sit under ``transformer.`` (GPT2LMHeadModel) or at the top (GPT2Model).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from zoo.hub.config_reader import ConfigReader
from zoo.hub.config_writer import require
from zoo.hub.llama_like import layers_with
from zoo.hub.names import Rule, fused_qkv, transposed
from zoo.specs.model import ModelSpec

MODEL_TYPE = "gpt2"
ARCHITECTURE = "GPT2LMHeadModel"
# the causal-mask buffers older checkpoints stored
IGNORED = re.compile(r".*\.attn\.(bias|masked_bias)$")
RENAMES: list[tuple[str, str]] = [
    (r"embed\.weight", "{p}wte.weight"),
    (r"positionals\.0\.weight", "{p}wpe.weight"),
    (r"final_norm\.(weight|bias)", r"{p}ln_f.\1"),
    (r"lm_head\.weight", "lm_head.weight"),
    (r"layers\.(\d+)\.attn_norm\.(weight|bias)", r"{p}h.\1.ln_1.\2"),
    (r"layers\.(\d+)\.ffn_norm\.(weight|bias)", r"{p}h.\1.ln_2.\2"),
    (r"layers\.(\d+)\.attention\.o_proj\.bias", r"{p}h.\1.attn.c_proj.bias"),
    (r"layers\.(\d+)\.ffn\.up_proj\.bias", r"{p}h.\1.mlp.c_fc.bias"),
    (r"layers\.(\d+)\.ffn\.down_proj\.bias", r"{p}h.\1.mlp.c_proj.bias"),
]
TRANSPOSED: list[tuple[str, str]] = [
    (r"layers\.(\d+)\.attention\.o_proj\.weight", r"{p}h.\1.attn.c_proj.weight"),
    (r"layers\.(\d+)\.ffn\.up_proj\.weight", r"{p}h.\1.mlp.c_fc.weight"),
    (r"layers\.(\d+)\.ffn\.down_proj\.weight", r"{p}h.\1.mlp.c_proj.weight"),
]


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a gpt2 config.json."""
    d, heads = r.need("n_embd"), r.need("n_head")
    r.expect("scale_attn_by_inverse_layer_idx", (None, False), "per-layer attention scaling")
    scale = None if r.get("scale_attn_weights", True) else 1.0
    attention: dict[str, Any] = {"kind": "mha", "n_heads": heads, "head_dim": d // heads, "bias": True}
    if scale is not None:
        attention["scale"] = scale
    eps = r.get("layer_norm_epsilon", 1e-5)
    return {
        "vocab_size": r.need("vocab_size"),
        "d_model": d,
        "n_layers": r.need("n_layer"),
        "max_seq_len": r.get("n_positions", 1024),
        "tie_embeddings": r.get("tie_word_embeddings", True),
        "norm": {"kind": "layernorm", "eps": eps, "bias": True},
        "positional": {"kind": "learned"},
        "attention": attention,
        "ffn": {
            "kind": "mlp",
            "hidden": r.get("n_inner", 4 * d),
            "activation": r.activation("activation_function", "gelu_new"),
            "bias": True,
        },
        "block": {"kind": "pre_norm"},
    }


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The gpt2 config.json computing what ``spec`` computes."""
    require(spec, MODEL_TYPE, attention=("mha", "gqa", "mqa"), ffn=("mlp",), norm=("layernorm",))
    base = spec.layer(0)
    att, ffn = base.attention, base.ffn
    return {
        "model_type": MODEL_TYPE,
        "vocab_size": spec.vocab_size,
        "n_embd": spec.d_model,
        "n_layer": spec.n_layers,
        "n_head": att.options.n_heads,
        "n_positions": spec.max_seq_len,
        "n_inner": ffn.options.hidden,
        "activation_function": {"gelu_tanh": "gelu_new"}.get(ffn.options.activation, ffn.options.activation),
        "layer_norm_epsilon": base.norm.options.eps,
        "tie_word_embeddings": spec.tie_embeddings,
        "scale_attn_weights": att.options.scale is None,
    }


def tensor_rules(zoo_names: Collection[str], hf_keys: Collection[str]) -> tuple[list[Rule], list[tuple[str, str]]]:
    """Fused c_attn split into q, k, v; Conv1D weights transposed; the rest renamed."""
    p = "" if "wte.weight" in hf_keys and "transformer.wte.weight" not in hf_keys else "transformer."
    rules = []
    for i in layers_with(zoo_names, r"attention\.q_proj\.weight"):
        a = f"layers.{i}.attention"
        for kind, weight in (("weight", True), ("bias", False)):
            names = (f"{a}.q_proj.{kind}", f"{a}.k_proj.{kind}", f"{a}.v_proj.{kind}")
            rules.append(fused_qkv(names, f"{p}h.{i}.attn.c_attn.{kind}", weight))
    for pattern, target in TRANSPOSED:
        for name in zoo_names:
            if re.fullmatch(pattern, name):
                rules.append(transposed(name, re.sub(pattern, target, name).format(p=p)))
    return rules, [(pattern, target.format(p=p)) for pattern, target in RENAMES]

"""Tensor-name maps between zoo's parameters and each Hugging Face family's checkpoint layout.

A ``Rule`` says how some zoo tensors are made from some checkpoint tensors and back: a
rename, GPT-2's Conv1D transpose and fused qkv, per-expert tensors stacked into zoo's
``(E, out, in)`` experts, transformers 5's fused ``gate_up_proj`` experts, and gpt-oss's
interleaved ``gate_up_proj`` (gate = even columns, up = odd) with ``(E, in, out)`` layout,
or the hub's MXFP4-quantized gpt-oss experts (dequantized expert by expert on load).
``load`` yields (zoo destination, checkpoint view) pairs so the loader copies view by
view and never builds a second copy of a whole tensor; ``save`` is the exact inverse.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

import torch

from zoo.errors import CheckpointError
from zoo.hub.families.mamba import MAMBA_RENAMES

Pairs = Iterable[tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Rule:
    """zoo tensors <- checkpoint tensors; ``load`` and ``save`` are inverse layouts."""

    zoo: tuple[str, ...]
    hf: tuple[str, ...]
    load: Callable[[list[torch.Tensor], list[torch.Tensor]], Pairs] = field(repr=False)
    save: Callable[[list[torch.Tensor]], list[torch.Tensor]] = field(repr=False)


def rename(zoo: str, hf: str) -> Rule:
    return Rule((zoo,), (hf,), lambda d, s: [(d[0], s[0])], lambda z: [z[0]])


def transposed(zoo: str, hf: str) -> Rule:
    """GPT-2's Conv1D stores (in, out); zoo's Linear holds (out, in)."""
    return Rule((zoo,), (hf,), lambda d, s: [(d[0], s[0].T)], lambda z: [z[0].T])


def fused_qkv(zoo: tuple[str, str, str], hf: str, weight: bool) -> Rule:
    """GPT-2's c_attn: q, k, v concatenated along the output dimension (Conv1D layout)."""

    def load(d: list[torch.Tensor], s: list[torch.Tensor]) -> Pairs:
        src = s[0].T if weight else s[0]  # (3d, d) or (3d,)
        sizes = [t.shape[0] for t in d]
        if src.shape[0] != sum(sizes):
            return [(torch.cat(d), src)]  # shape mismatch, reported by the loader
        return list(zip(d, torch.split(src, sizes)))

    return Rule(zoo, (hf,), load, lambda z: [torch.cat(z).T if weight else torch.cat(z)])


def split_rows(zoo: tuple[str, ...], hf: str) -> Rule:
    """One checkpoint tensor = zoo's tensors concatenated along dim 0 (ModernBERT's Wqkv, Wi)."""

    def load(d: list[torch.Tensor], s: list[torch.Tensor]) -> Pairs:
        sizes = [t.shape[0] for t in d]
        if s[0].shape[0] != sum(sizes):
            return [(torch.cat(d), s[0])]  # shape mismatch, reported by the loader
        return list(zip(d, torch.split(s[0], sizes)))

    return Rule(zoo, (hf,), load, lambda z: [torch.cat(z)])


def stacked_experts(zoo: str, hf: list[str]) -> Rule:
    """One checkpoint tensor per expert -> zoo's stacked (E, ...) parameter."""

    def load(d: list[torch.Tensor], s: list[torch.Tensor]) -> Pairs:
        return [(d[0][e], s[e]) for e in range(len(s))]

    return Rule((zoo,), tuple(hf), load, lambda z: list(z[0].unbind(0)))


def fused_gate_up(zoo: tuple[str, str], hf: str) -> Rule:
    """transformers 5 experts: gate_up_proj (E, 2F, d) = [gate; up] along dim 1."""

    def load(d: list[torch.Tensor], s: list[torch.Tensor]) -> Pairs:
        F = d[0].shape[1]
        return [(d[0], s[0][:, :F]), (d[1], s[0][:, F:])]

    return Rule(zoo, (hf,), load, lambda z: [torch.cat(z, dim=1)])


def interleaved_gate_up(zoo: tuple[str, str], hf: str, weight: bool) -> Rule:
    """gpt-oss: gate_up_proj (E, d, 2F), gate = even columns, up = odd; bias (E, 2F) alike."""

    def load(d: list[torch.Tensor], s: list[torch.Tensor]) -> Pairs:
        src = s[0].transpose(1, 2) if weight else s[0]  # (E, 2F, d) or (E, 2F)
        return [(d[0], src[:, 0::2]), (d[1], src[:, 1::2])]

    def save(z: list[torch.Tensor]) -> list[torch.Tensor]:
        gate, up = z  # (E, F, d) or (E, F)
        both = torch.stack((gate, up), dim=2).flatten(1, 2)  # (E, 2F, ...) gate, up interleaved
        return [both.transpose(1, 2) if weight else both]

    return Rule(zoo, (hf,), load, save)


def transposed_experts(zoo: str, hf: str) -> Rule:
    """gpt-oss down_proj (E, F, d) -> zoo w_down (E, d, F)."""
    return Rule((zoo,), (hf,), lambda d, s: [(d[0], s[0].transpose(1, 2))], lambda z: [z[0].transpose(1, 2)])


FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def dequantize_mxfp4(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """MXFP4 -> float32: blocks (..., G, 16) uint8 hold two FP4 codes per byte (low nibble
    first), scales (..., G) uint8 a shared power of two (biased by 127); -> (..., G * 32)."""
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32)
    codes = blocks.to(torch.int64)  # (..., G, 16)
    values = torch.stack((lut[codes & 0x0F], lut[codes >> 4]), dim=-1).flatten(-2)  # (..., G, 32)
    exponent = scales.to(torch.int32) - 127  # (..., G)
    return torch.ldexp(values, exponent[..., None].float()).flatten(-2)  # (..., G * 32)


def mxfp4_gate_up(zoo: tuple[str, str], hf: tuple[str, str]) -> Rule:
    """gpt-oss hub checkpoints: gate_up_proj_blocks (E, 2F, G, 16) + _scales (E, 2F, G);
    dequantized rows interleave gate (even) and up (odd). One expert at a time, lazily."""

    def load(d: list[torch.Tensor], s: list[torch.Tensor]) -> Pairs:
        for e in range(s[0].shape[0]):
            rows = dequantize_mxfp4(s[0][e], s[1][e])  # (2F, d)
            yield d[0][e], rows[0::2]
            yield d[1][e], rows[1::2]

    return Rule(zoo, hf, load, _quantized_save)


def mxfp4_down(zoo: str, hf: tuple[str, str]) -> Rule:
    """gpt-oss down_proj_blocks (E, d, G, 16) + _scales (E, d, G) -> w_down (E, d, F)."""

    def load(d: list[torch.Tensor], s: list[torch.Tensor]) -> Pairs:
        for e in range(s[0].shape[0]):
            yield d[0][e], dequantize_mxfp4(s[0][e], s[1][e])

    return Rule((zoo,), hf, load, _quantized_save)


def _quantized_save(z: list[torch.Tensor]) -> list[torch.Tensor]:
    raise CheckpointError("zoo writes unquantized checkpoints only (MXFP4 is read, not written)")


# ---- per-family plans -----------------------------------------------------------------------
LLAMA_RENAMES: list[tuple[str, str]] = [
    (r"embed\.weight", "model.embed_tokens.weight"),
    (r"final_norm\.weight", "model.norm.weight"),
    (r"lm_head\.weight", "lm_head.weight"),
    (r"layers\.(\d+)\.attn_norm\.weight", r"model.layers.\1.input_layernorm.weight"),
    (r"layers\.(\d+)\.ffn_norm\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
    (r"layers\.(\d+)\.attention\.(\w+)\.(weight|bias)", r"model.layers.\1.self_attn.\2.\3"),
    (r"layers\.(\d+)\.attention\.sinks", r"model.layers.\1.self_attn.sinks"),
    (r"layers\.(\d+)\.ffn\.(gate_proj|up_proj|down_proj)\.(weight|bias)", r"model.layers.\1.mlp.\2.\3"),
]
GEMMA_RENAMES: list[tuple[str, str]] = [
    (r"layers\.(\d+)\.ffn_norm\.weight", r"model.layers.\1.pre_feedforward_layernorm.weight"),
    (r"layers\.(\d+)\.post_attn_norm\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
    (r"layers\.(\d+)\.post_ffn_norm\.weight", r"model.layers.\1.post_feedforward_layernorm.weight"),
] + LLAMA_RENAMES
GPT2_RENAMES: list[tuple[str, str]] = [
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
GPT2_TRANSPOSED: list[tuple[str, str]] = [
    (r"layers\.(\d+)\.attention\.o_proj\.weight", r"{p}h.\1.attn.c_proj.weight"),
    (r"layers\.(\d+)\.ffn\.up_proj\.weight", r"{p}h.\1.mlp.c_fc.weight"),
    (r"layers\.(\d+)\.ffn\.down_proj\.weight", r"{p}h.\1.mlp.c_proj.weight"),
]
# Qwen3-Next: Gated DeltaNet layers keep transformers' names under linear_attn; the MoE's
# shared expert and its sigmoid gate sit beside the routed experts
QWEN3_NEXT_RENAMES: list[tuple[str, str]] = [
    (r"layers\.(\d+)\.attention\.(in_proj_qkvz|in_proj_ba|conv1d|out_proj|norm)\.weight", r"model.layers.\1.linear_attn.\2.weight"),
    (r"layers\.(\d+)\.attention\.(dt_bias|A_log)", r"model.layers.\1.linear_attn.\2"),
    (r"layers\.(\d+)\.ffn\.shared\.(gate_proj|up_proj|down_proj)\.weight", r"model.layers.\1.mlp.shared_expert.\2.weight"),
    (r"layers\.(\d+)\.ffn\.shared_gate\.weight", r"model.layers.\1.mlp.shared_expert_gate.weight"),
] + LLAMA_RENAMES
MAMBA2_RENAMES: list[tuple[str, str]] = [
    (r"embed\.weight", "backbone.embeddings.weight"),
    (r"final_norm\.weight", "backbone.norm_f.weight"),
    (r"lm_head\.weight", "lm_head.weight"),
    (r"layers\.(\d+)\.attn_norm\.weight", r"backbone.layers.\1.norm.weight"),
    (r"layers\.(\d+)\.attention\.(.+)", r"backbone.layers.\1.mixer.\2"),
]
# checkpoint tensors that are no weights: GPT-2's causal-mask buffers, stored RoPE frequencies,
# and Qwen3-Next's multi-token-prediction head (mtp.*, unused by a causal LM, as in transformers)
IGNORED_HF = re.compile(r"(mtp\..*|.*(\.attn\.bias|\.attn\.masked_bias|rotary_emb\.inv_freq))$")


def _bert_renames(zoo_names: Collection[str], hf_keys: Collection[str], model_type: str) -> list[tuple[str, str]]:
    """BERT / RoBERTa: BertModel names (prefix-less, pooler) or *ForMaskedLM names under
    ``bert.`` / ``roberta.`` with the prediction head beside them."""
    root = "bert" if model_type == "bert" else "roberta"
    masked = "lm_head.bias" in zoo_names
    prefixed = any(k.startswith(f"{root}.") for k in hf_keys) if hf_keys else masked
    p = f"{root}." if prefixed else ""
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
    head = "cls.predictions" if root == "bert" else "lm_head"
    dense, norm = ("transform.dense", "transform.LayerNorm") if root == "bert" else ("dense", "layer_norm")
    return renames + [
        (r"lm_head\.dense\.(weight|bias)", rf"{head}.{dense}.\1"),
        (r"lm_head\.norm\.(weight|bias)", rf"{head}.{norm}.\1"),
        (r"lm_head\.bias", f"{head}.bias"),
        (r"lm_head\.weight", f"{head}.decoder.weight"),  # untied only (a tied table is embed.weight)
    ]


# checkpoint tensors of these families that zoo's model does not hold: BERT's next-sentence
# head, a pooler beside a masked-LM head, the tied decoder (a copy of the embedding and its
# bias), stored position / token-type id buffers
BERT_IGNORED = re.compile(
    r"^(cls\.seq_relationship\..*|(bert\.|roberta\.)?pooler\..*|cls\.predictions\.decoder\.(weight|bias)"
    r"|lm_head\.decoder\.(weight|bias)|.*embeddings\.(position_ids|token_type_ids))$"
)
LEGACY_NORM_NAMES = (("LayerNorm.gamma", "LayerNorm.weight"), ("LayerNorm.beta", "LayerNorm.bias"))


def ignored_tensor(model_type: str, name: str) -> bool:
    """A checkpoint tensor that is no weight of zoo's model for this family."""
    if IGNORED_HF.match(name):
        return True
    return model_type in ("bert", "roberta") and bool(BERT_IGNORED.match(name))


def legacy_aliases(names: Collection[str]) -> dict[str, str]:
    """Current name -> stored name for checkpoints written with old tensor names (BERT's
    TensorFlow-era ``LayerNorm.gamma`` / ``LayerNorm.beta``)."""
    aliases = {}
    for name in names:
        for old, new in LEGACY_NORM_NAMES:
            if name.endswith(old):
                aliases[name[: -len(old)] + new] = name
    return aliases


def _layers_with(zoo_names: Collection[str], suffix: str) -> list[str]:
    return sorted({m.group(1) for n in zoo_names if (m := re.fullmatch(rf"layers\.(\d+)\.{suffix}", n))}, key=int)


def _gpt2_rules(zoo_names: Collection[str], hf_keys: Collection[str]) -> tuple[list[Rule], list[tuple[str, str]]]:
    p = "" if "wte.weight" in hf_keys and "transformer.wte.weight" not in hf_keys else "transformer."
    rules = []
    for i in _layers_with(zoo_names, r"attention\.q_proj\.weight"):
        a = f"layers.{i}.attention"
        for kind, weight in (("weight", True), ("bias", False)):
            names = (f"{a}.q_proj.{kind}", f"{a}.k_proj.{kind}", f"{a}.v_proj.{kind}")
            rules.append(fused_qkv(names, f"{p}h.{i}.attn.c_attn.{kind}", weight))  # type: ignore[arg-type]
    for pattern, target in GPT2_TRANSPOSED:
        for name in zoo_names:
            if re.fullmatch(pattern, name):
                rules.append(transposed(name, re.sub(pattern, target, name).format(p=p)))
    return rules, [(pat, tgt.format(p=p)) for pat, tgt in GPT2_RENAMES]


def _expert_rules(zoo_names: Collection[str], hf_keys: Collection[str], moe_prefix: str, router: str,
                  per_expert: tuple[str, str, str], n_experts: Callable[[str], int]) -> list[Rule]:
    """MoE layers: the hub's per-expert tensors, or transformers 5's fused 3-D ones."""
    rules = []
    for i in _layers_with(zoo_names, r"ffn\.w_up"):
        z = f"layers.{i}.ffn"
        h = f"model.layers.{i}.{moe_prefix}"
        if f"model.layers.{i}.mlp.experts.gate_up_proj" in hf_keys:  # fused layout, always under mlp.
            h = f"model.layers.{i}.mlp"
            rules.append(fused_gate_up((f"{z}.w_gate", f"{z}.w_up"), f"{h}.experts.gate_up_proj"))
            rules.append(rename(f"{z}.w_down", f"{h}.experts.down_proj"))
        else:
            E = n_experts(f"{z}.w_up")
            for zoo_name, hf_name in zip(("w_gate", "w_up", "w_down"), per_expert):
                rules.append(stacked_experts(f"{z}.{zoo_name}", [f"{h}.experts.{e}.{hf_name}.weight" for e in range(E)]))
        rules.append(rename(f"{z}.router.weight", f"{h}.{router}.weight"))
    return rules


def _gpt_oss_rules(zoo_names: Collection[str], hf_keys: Collection[str]) -> list[Rule]:
    rules = []
    for i in _layers_with(zoo_names, r"ffn\.w_up"):
        z, h = f"layers.{i}.ffn", f"model.layers.{i}.mlp"
        if f"{h}.experts.gate_up_proj_blocks" in hf_keys:  # the hub's MXFP4 experts
            x = f"{h}.experts"
            rules += [
                mxfp4_gate_up((f"{z}.w_gate", f"{z}.w_up"), (f"{x}.gate_up_proj_blocks", f"{x}.gate_up_proj_scales")),
                mxfp4_down(f"{z}.w_down", (f"{x}.down_proj_blocks", f"{x}.down_proj_scales")),
            ]
        else:
            rules += [
                interleaved_gate_up((f"{z}.w_gate", f"{z}.w_up"), f"{h}.experts.gate_up_proj", weight=True),
                transposed_experts(f"{z}.w_down", f"{h}.experts.down_proj"),
            ]
        rules += [
            interleaved_gate_up((f"{z}.b_gate", f"{z}.b_up"), f"{h}.experts.gate_up_proj_bias", weight=False),
            rename(f"{z}.b_down", f"{h}.experts.down_proj_bias"),
            rename(f"{z}.router.weight", f"{h}.router.weight"),
            rename(f"{z}.router.bias", f"{h}.router.bias"),
        ]
    return rules


def tensor_rules(model_type: str, zoo_shapes: Mapping[str, torch.Size], hf_keys: Collection[str]) -> list[Rule]:
    """Every zoo parameter's rule for this family; a parameter no rule covers is an error."""
    names = list(zoo_shapes)
    n_experts = lambda name: int(zoo_shapes[name][0])  # noqa: E731
    renames = LLAMA_RENAMES
    if model_type == "gpt2":
        rules, renames = _gpt2_rules(names, hf_keys)
    elif model_type == "mixtral":
        prefix = "mlp" if any(".mlp.gate.weight" in k for k in hf_keys) else "block_sparse_moe"
        rules = _expert_rules(names, hf_keys, prefix, "gate", ("w1", "w3", "w2"), n_experts)
    elif model_type == "qwen3_moe":
        rules = _expert_rules(names, hf_keys, "mlp", "gate", ("gate_proj", "up_proj", "down_proj"), n_experts)
    elif model_type == "gpt_oss":
        rules = _gpt_oss_rules(names, hf_keys)
    elif model_type in ("bert", "roberta"):
        rules, renames = [], _bert_renames(names, hf_keys, model_type)
    elif model_type == "qwen3_next":
        rules = _expert_rules(names, hf_keys, "mlp", "gate", ("gate_proj", "up_proj", "down_proj"), n_experts)
        renames = QWEN3_NEXT_RENAMES
    elif model_type == "mamba2":
        rules, renames = [], MAMBA2_RENAMES
    else:
        rules = []
        renames = GEMMA_RENAMES if model_type == "gemma3_text" else LLAMA_RENAMES
        if model_type in ("mamba", "falcon_mamba"):
            renames = MAMBA_RENAMES
    claimed = {n for rule in rules for n in rule.zoo}
    for name in names:
        if name in claimed:
            continue
        target = renamed(name, renames)
        if target is None:
            raise CheckpointError(f"zoo parameter {name!r} has no counterpart in a {model_type} checkpoint")
        rules.append(rename(name, target))
    return rules


def renamed(name: str, renames: list[tuple[str, str]]) -> str | None:
    """The checkpoint name of zoo parameter ``name`` by the first matching rename, or None."""
    for pattern, target in renames:
        if re.fullmatch(pattern, name):
            return re.sub(pattern, target, name)
    return None

"""zoo parameter names <-> llama.cpp's GGUF tensor names, and the layout changes between them.

llama.cpp names tensors ``blk.{i}.attn_q.weight`` etc. (gguf-py ``constants.TENSOR_NAMES``)
and stores experts stacked, ``(E, out, in)`` like zoo. Its converter changes some values:
``LlamaModel.permute`` reorders the rows of q and k of the llama architecture (Llama,
Mistral, Mixtral) from the rotate-half to the interleaved rotary pairing, and Gemma 3's
norm weights are stored with the ``+ 1`` of ``Gemma3RMSNorm`` folded in. Both are undone
here; qwen2, qwen3, qwen3moe, gemma3 and gpt-oss keep transformers' row order.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from zoo.errors import CheckpointError

Transform = Callable[[torch.Tensor], torch.Tensor]

RENAMES: list[tuple[str, str]] = [
    (r"embed\.weight", "token_embd.weight"),
    (r"final_norm\.weight", "output_norm.weight"),
    (r"lm_head\.weight", "output.weight"),
    (r"layers\.(\d+)\.attn_norm\.weight", r"blk.\1.attn_norm.weight"),
    (r"layers\.(\d+)\.ffn_norm\.weight", r"blk.\1.ffn_norm.weight"),
    (r"layers\.(\d+)\.post_attn_norm\.weight", r"blk.\1.post_attention_norm.weight"),
    (r"layers\.(\d+)\.post_ffn_norm\.weight", r"blk.\1.post_ffw_norm.weight"),
    (r"layers\.(\d+)\.attention\.(q|k|v)_proj\.(weight|bias)", r"blk.\1.attn_\2.\3"),
    (r"layers\.(\d+)\.attention\.o_proj\.(weight|bias)", r"blk.\1.attn_output.\2"),
    (r"layers\.(\d+)\.attention\.(q|k)_norm\.weight", r"blk.\1.attn_\2_norm.weight"),
    (r"layers\.(\d+)\.attention\.sinks", r"blk.\1.attn_sinks.weight"),
    (r"layers\.(\d+)\.ffn\.(gate|up|down)_proj\.weight", r"blk.\1.ffn_\2.weight"),
    (r"layers\.(\d+)\.ffn\.w_(gate|up|down)", r"blk.\1.ffn_\2_exps.weight"),
    (r"layers\.(\d+)\.ffn\.b_(gate|up|down)", r"blk.\1.ffn_\2_exps.bias"),
    (r"layers\.(\d+)\.ffn\.router\.(weight|bias)", r"blk.\1.ffn_gate_inp.\2"),
]
# gpt-oss names its pre-FFN norm (transformers' post_attention_layernorm) post_attention_norm
RENAMES_BY_ARCH: dict[str, list[tuple[str, str]]] = {
    "gpt-oss": [(r"layers\.(\d+)\.ffn_norm\.weight", r"blk.\1.post_attention_norm.weight"), *RENAMES],
}
# tensors that hold no weights of their own: RoPE factors (read into the spec instead)
IGNORED = frozenset({"rope_freqs.weight"})


@dataclass(frozen=True)
class GGUFRule:
    """zoo parameter <- GGUF tensor, through ``transform`` (identity when None)."""

    zoo: str
    gguf: str
    transform: Transform | None = None


def unpermute_rotary(heads: int) -> Transform:
    """Inverse of llama.cpp's ``LlamaModel.permute``: per head, rows stored as interleaved
    pairs (x0, x_half, x1, x_half+1, ...) go back to transformers' two halves."""

    def undo(t: torch.Tensor) -> torch.Tensor:
        rows = t.shape[0]
        return t.reshape(heads, rows // heads // 2, 2, *t.shape[1:]).transpose(1, 2).reshape(t.shape)

    return undo


def _minus_one(t: torch.Tensor) -> torch.Tensor:
    return t - 1


# per architecture: (zoo parameter pattern, transform factory taking (n_heads, n_kv_heads))
TRANSFORMS: dict[str, list[tuple[str, Callable[[int, int], Transform]]]] = {
    "llama": [
        (r".*attention\.q_proj\.(weight|bias)", lambda heads, kv: unpermute_rotary(heads)),
        (r".*attention\.k_proj\.(weight|bias)", lambda heads, kv: unpermute_rotary(kv)),
    ],
    "gemma3": [(r".*norm\.weight", lambda heads, kv: _minus_one)],
}


def gguf_rules(arch: str, zoo_names: list[str], n_heads: int, n_kv_heads: int) -> list[GGUFRule]:
    """One rule per zoo parameter for a GGUF of architecture ``arch``."""
    renames = RENAMES_BY_ARCH.get(arch, RENAMES)
    rules = []
    for name in zoo_names:
        target = next((re.sub(p, t, name) for p, t in renames if re.fullmatch(p, name)), None)
        if target is None:
            raise CheckpointError(f"zoo parameter {name!r} has no counterpart in a GGUF file of architecture {arch!r}")
        transform = next(
            (make(n_heads, n_kv_heads) for p, make in TRANSFORMS.get(arch, []) if re.fullmatch(p, name)), None
        )
        rules.append(GGUFRule(name, target, transform))
    return rules

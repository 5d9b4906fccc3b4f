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
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

import torch

from zoo.errors import CheckpointError

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


# ---- a family's plan, completed ----------------------------------------------------------
# checkpoint tensors that are no weights in any family: stored RoPE frequencies
IGNORED_HF = re.compile(r".*rotary_emb\.inv_freq$")
LEGACY_NORM_NAMES = (("LayerNorm.gamma", "LayerNorm.weight"), ("LayerNorm.beta", "LayerNorm.bias"))


def legacy_aliases(names: Collection[str]) -> dict[str, str]:
    """Current name -> stored name for checkpoints written with old tensor names (BERT's
    TensorFlow-era ``LayerNorm.gamma`` / ``LayerNorm.beta``)."""
    aliases = {}
    for name in names:
        for old, new in LEGACY_NORM_NAMES:
            if name.endswith(old):
                aliases[name[: -len(old)] + new] = name
    return aliases


def renamed(name: str, renames: list[tuple[str, str]]) -> str | None:
    """The checkpoint name of zoo parameter ``name`` by the first matching rename, or None."""
    for pattern, target in renames:
        if re.fullmatch(pattern, name):
            return re.sub(pattern, target, name)
    return None

"""A GGUF that stays quantized: its blocks loaded into zoo's packed layouts, not floats.

- ``Q4_0``, ``Q4_1``, ``Q4_K``: every group of 32 weights is ``q * scale + offset`` with q in
  0..15 (Q4_0: ``(q - 8) * d``; Q4_1: ``q * d + m``; Q4_K: ``q * d * sc - dmin * m`` per
  sub-block), which is exactly zoo's int4 layout (``Int4Linear``, group 32): the 4-bit values
  and the block scales are kept, not re-quantized. The scales are stored in the model's dtype
  (float32 keeps them exactly; bfloat16 rounds the float16 scales to 8 bits of mantissa).
- ``Q8_0``, ``Q5_0``, ``Q5_1``, ``Q5_K``, ``Q6_K``: zoo's int8 layout has one scale per output
  row (torch's int8 kernel), not one per block of 32, so these are re-quantized per row from
  the dequantized weights (``Int8Linear``): lossy, and measured in tests/hub/gguf/test_stays_quantized.py.
- The token table, when its type has the int8 layout (``Q8_0``, ``Q5_*``, ``Q6_K``: what
  llama.cpp gives most files' ``token_embd``), is re-quantized per row into int8 rows
  (``Int8Embedding``); a tied head becomes an ``Int8Linear`` on those same buffers, so the
  matrix is held once, as ``zoo.quant.quantize`` ties int8 (``use_int8_rows``). A 4-bit table
  stays float: the int4 layout cannot be read by rows.
- Everything else (norms, stacked experts, F16/BF16/F32, Q2_K, Q3_K, IQ types) is
  dequantized into the model's dtype, as ``dequantize=True`` does for all.

Only plain ``nn.Linear`` weights (2-D) take a packed layout. Each layer is built straight from
the file on the target device with no float copy of its matrix: 4-bit values are read from the
blocks' bytes (``nibbles``), 8-bit matrices are dequantized and re-quantized ``ROWS_PER_SLICE``
rows at a time. (Dequantizing whole matrices to float32 left a 95 MB packed SmolLM2-135M at
~430 MB resident after loading: glibc kept the freed copies' heap, see ``from_gguf``.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from zoo.hub.gguf.names import GGUFRule
from zoo.hub.gguf.reader import GGUFCheckpoint
from zoo.quant import replace_linear, use_int8_rows
from zoo.quant.linear import Int4Linear, Int8Embedding, Int8Linear, QuantizedLinear, quantize_int8

GROUP = 32
Groups = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]  # blocks (n, bytes) -> scales, offsets (n, groups)


def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    return blocks[:, at : at + 2].copy().view(np.float16).astype(np.float32)  # (n, 1)


def _q4_0(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = _f16(blocks, 0)
    return d, -8 * d


def _q4_1(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return _f16(blocks, 0), _f16(blocks, 2)


def _q4_k(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import gguf

    sc, m = gguf.quants.Q4_K.get_scale_min(blocks[:, 4:16].copy())  # (n, 8) each, 6-bit
    return _f16(blocks, 0) * sc.astype(np.float32), -(_f16(blocks, 2) * m.astype(np.float32))


# per type: its block scales and offsets, where its 4-bit values start in a block, and how
# many bytes hold the low nibbles of one run (then the same bytes' high nibbles continue it):
# Q4_0/Q4_1's 16 bytes hold values 0-15 low and 16-31 high; Q4_K's 128 bytes are four runs of
# 32 bytes, each two groups of 32 values (gguf-py's dequantization reads them so)
INT4_TYPES: dict[str, tuple[Groups, int, int]] = {
    "Q4_0": (_q4_0, 2, 16),
    "Q4_1": (_q4_1, 4, 16),
    "Q4_K": (_q4_k, 16, 32),
}
INT8_TYPES = frozenset({"Q8_0", "Q5_0", "Q5_1", "Q5_K", "Q6_K"})
ROWS_PER_SLICE = 4096  # an int8 matrix is re-quantized this many rows at a time (<= 4096 x in floats)


def layout(type_name: str) -> str | None:
    """The packed layout a GGUF type loads into: ``int4``, ``int8``, or None (dequantized)."""
    return "int4" if type_name in INT4_TYPES else "int8" if type_name in INT8_TYPES else None


def holds_packed(g: GGUFCheckpoint) -> bool:
    """Whether any matrix of the file loads into a packed layout (not dequantized)."""
    return any(len(g.shape(name)) == 2 and layout(g.type_name(name)) is not None for name in g.tensors)


def nibbles(blocks: np.ndarray, start: int, run: int) -> torch.Tensor:
    """The 4-bit values of blocks (n, bytes) in order (n, values per block), uint8 0..15,
    read straight from the bytes: no float copy of the matrix is made."""
    qs = torch.from_numpy(blocks[:, start:].copy()).reshape(blocks.shape[0], -1, 1, run)  # (n, runs, 1, run)
    shifts = torch.tensor([0, 4], dtype=torch.uint8).reshape(1, 1, 2, 1)
    return ((qs >> shifts) & 15).reshape(blocks.shape[0], -1)  # (n, runs * 2 * run)


def _int4_layer(
    g: GGUFCheckpoint, rule: GGUFRule, bias: torch.Tensor | None, dtype: torch.dtype, device: torch.device
) -> Int4Linear:
    import gguf

    qtype = gguf.GGMLQuantizationType(g.info(rule.gguf).type_id)
    out, width = g.shape(rule.gguf)
    block_bytes = gguf.GGML_QUANT_SIZES[qtype][1]
    groups, start, run = INT4_TYPES[qtype.name]
    blocks = g.raw(rule.gguf).reshape(-1, block_bytes)  # (blocks, bytes): a view of the file
    scales, offsets = groups(blocks)
    scales = torch.from_numpy(scales.reshape(out, width // GROUP))  # (out, G)
    offsets = torch.from_numpy(offsets.reshape(out, width // GROUP))  # (out, G)
    values = nibbles(blocks, start, run).reshape(out, width)  # (out, in) uint8: w = q * scale + offset
    if rule.transform is not None:  # a permutation of rows: the values and their scales move together
        values, scales, offsets = rule.transform(values), rule.transform(scales), rule.transform(offsets)
    return Int4Linear.from_groups(values.to(device), scales.to(device), offsets.to(device), bias, dtype)


def int8_rows(g: GGUFCheckpoint, rule: GGUFRule, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A GGUF matrix re-quantized per row (``quantize_int8``) a slice of rows at a time:
    (q (out, in) int8, scales (out,) float32), rows in zoo's order."""
    out, width = g.shape(rule.gguf)
    q = torch.empty(out, width, dtype=torch.int8, device=device)  # (out, in)
    scales = torch.empty(out, dtype=torch.float32, device=device)  # (out,)
    for first in range(0, out, ROWS_PER_SLICE):
        last = min(first + ROWS_PER_SLICE, out)
        q[first:last], scales[first:last] = quantize_int8(g.rows(rule.gguf, first, last).to(device))
    if rule.transform is not None:  # a permutation of rows: per-row scales move with their rows
        q, scales = rule.transform(q), rule.transform(scales[:, None])[:, 0]
    return q.contiguous(), scales


def _int8_layer(
    g: GGUFCheckpoint, rule: GGUFRule, bias: torch.Tensor | None, dtype: torch.dtype, device: torch.device
) -> Int8Linear:
    q, scales = int8_rows(g, rule, device)
    return Int8Linear.from_rows(q, scales, bias, dtype)


def place_quantized(
    model: nn.Module, g: GGUFCheckpoint, rules: list[GGUFRule], dtype: torch.dtype, device: torch.device
) -> set[str]:
    """Replace every plain linear whose GGUF weight has a packed layout by its quantized layer
    (built on ``device``; the model may still be on meta); the zoo names of the parameters
    placed (weights and their biases)."""
    by_zoo = {rule.zoo: rule for rule in rules}
    placed: set[str] = set()
    for rule in rules:
        path, _, leaf = rule.zoo.rpartition(".")
        if rule.gguf not in g.tensors:  # the float loader names it
            continue
        if leaf != "weight" or layout(g.type_name(rule.gguf)) is None or len(g.shape(rule.gguf)) != 2:
            continue
        parent_path, _, child = path.rpartition(".")
        parent = model.get_submodule(parent_path)
        linear = getattr(parent, child)
        # a Linear with sub-modules computes more than x W^T + b (zoo.quant.quantize skips it too);
        # a misshapen tensor is left to the float loader, which names it
        if (
            not isinstance(linear, nn.Linear)
            or any(linear.children())
            or tuple(linear.weight.shape) != g.shape(rule.gguf)
        ):
            continue
        bias_rule = by_zoo.get(f"{path}.bias")
        bias = None
        if bias_rule is not None:
            bias = g.tensor(bias_rule.gguf)
            bias = (bias_rule.transform(bias) if bias_rule.transform else bias).to(device, dtype)
            placed.add(bias_rule.zoo)
        build = _int4_layer if layout(g.type_name(rule.gguf)) == "int4" else _int8_layer
        replace_linear(parent, child, build(g, rule, bias, dtype, device))
        placed.add(rule.zoo)
    return placed


def place_table(
    model: nn.Module, g: GGUFCheckpoint, rules: list[GGUFRule], dtype: torch.dtype, device: torch.device
) -> set[str]:
    """The token table as int8 rows when its GGUF type has the int8 layout, and a tied head as
    an ``Int8Linear`` on the same buffers (module docstring); the zoo names placed."""
    rule = next((r for r in rules if r.zoo == "embed.weight" and r.gguf in g.tensors), None)
    embed, head = model.get_submodule("embed"), model.get_submodule("lm_head")
    if rule is None or layout(g.type_name(rule.gguf)) != "int8" or not isinstance(embed, nn.Embedding):
        return set()
    if tuple(embed.weight.shape) != g.shape(rule.gguf):  # the float loader names it
        return set()
    tied = isinstance(head, nn.Linear) and head.weight is embed.weight
    if tied and any(head.children()):  # a head computing more than x W^T keeps the float table
        return set()
    q, scales = int8_rows(g, rule, device)
    rows = Int8Linear.from_rows(q, scales, None, dtype)
    if tied:  # the head multiplies by the same int8 matrix
        replace_linear(model, "lm_head", rows)
    use_int8_rows(embed, Int8Embedding(rows.qweight, rows.scales))
    return {rule.zoo}


def materialize(model: nn.Module, device: torch.device) -> None:
    """Give every parameter and buffer still on meta empty storage on ``device`` (the loader
    fills them); quantized layers already there are left alone."""
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is not None and param.is_meta:
                module._parameters[name] = nn.Parameter(
                    torch.empty_like(param, device=device), requires_grad=param.requires_grad
                )
        for name, buffer in list(module._buffers.items()):
            if buffer is not None and buffer.is_meta:
                module._buffers[name] = torch.empty_like(buffer, device=device)


def describe(g: GGUFCheckpoint, model: nn.Module) -> str:
    """What the file holds and how memory holds it, e.g. ``Q4_1/Q8_0 -> int4 x210, int8 x1,
    int8 table (the head's); the rest bfloat16``."""
    types = Counter(g.type_name(name) for name in g.tensors if len(g.shape(name)) >= 2)
    kinds = Counter(f"int{m.bits}" for m in model.modules() if isinstance(m, QuantizedLinear))
    heads = {id(m.qweight) for m in model.modules() if isinstance(m, Int8Linear)}
    tables = [m for m in model.modules() if isinstance(m, Int8Embedding)]
    floats = str(next(p.dtype for p in model.parameters())).removeprefix("torch.")
    shared = " (the head's)"
    held = ", ".join(
        [f"{k} x{n}" for k, n in sorted(kinds.items())]
        + [f"int8 table{shared if id(t.qweight) in heads else ''}" for t in tables]
    )
    file = "/".join(t for t, _ in types.most_common())
    return f"{file} -> {held}; the rest {floats}" if held else f"{file} -> {floats}"

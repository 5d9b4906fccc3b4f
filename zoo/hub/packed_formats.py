"""AWQ and GPTQ packings: ``quantization_config`` read, packed int32 tensors unpacked.

Both formats store, per linear layer ``P``, 4-bit integers ``q`` packed eight to an int32
(``P.qweight``), integer zero points ``z`` packed alike (``P.qzeros``) and float16 scales
``s`` (``P.scales``), one per group of ``group_size`` input rows and output column; the weight
is ``W[o, i] = (q[i, o] - z[g(i), o]) * s[g(i), o]`` (transformers' ``(out, in)`` order).
What differs is the packing:

- AWQ (AutoAWQ's GEMM kernels, ``version: gemm``): ``qweight`` (in, out / 8) packs eight
  *output columns* per int32, nibble ``k`` (bits ``4k..4k+3``) holding column
  ``8c + AWQ_ORDER[k]`` with ``AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]``; ``qzeros``
  (in / group, out / 8) packs the same way; ``scales`` (in / group, out). Reference:
  AutoAWQ ``awq/utils/packing_utils.py`` (``unpack_awq``, ``reverse_awq_order`` with
  ``AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]``, ``dequantize_gemm``), as transformers'
  AWQ integration calls it.
- GPTQ (AutoGPTQ / optimum / GPTQModel): ``qweight`` (in * bits / 32, out) packs ``32 / bits``
  consecutive *input rows* per int32, lowest bits first; ``qzeros`` (groups, out * bits / 32)
  packs consecutive output columns, lowest bits first; ``scales`` (groups, out); ``g_idx``
  (in,) the group of each input row (not monotone under act-order, ``desc_act``). In the
  v1 format (``checkpoint_format: gptq``, the default) the stored zero is one less than the
  real one (``z = stored + 1``, a historical off-by-one kept for compatibility); ``gptq_v2``
  stores ``z`` itself. Reference: AutoGPTQ ``auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py``
  (the torch path of ``forward``: ``zeros = zeros + 1``, ``weight = scales * (weight - zeros)``)
  and ``qlinear_cuda.py`` (the same with ``scales[g_idx]``, ``zeros[g_idx]``).

Only these keys of ``quantization_config`` change what the weights are: ``bits``,
``group_size``, ``zero_point`` and ``version`` (AWQ), ``checkpoint_format`` (GPTQ). ``sym``
and ``desc_act`` say how the quantizer chose ``z`` and ``g_idx``, which the tensors hold;
every other key (damping, dataset, kernel backend, fusing) is the quantizer's or a
kernel's setting. The tensors say which layers are packed (``modules_to_not_convert``,
GPTQ's ``lm_head``): a layer with ``P.qweight`` is packed, one with ``P.weight`` is float.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from zoo.errors import CheckpointError, allowed

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble k of an AWQ int32 holds column 8c + AWQ_ORDER[k]
METHODS = ("awq", "gptq")
GPTQ_BITS = (2, 4, 8)  # packings that tile an int32; 3-bit values straddle words and are refused
GPTQ_FORMATS = {"gptq": 1, "gptq_v2": 0}  # checkpoint_format -> what is added to a stored zero
AWQ_VERSIONS = ("gemm",)  # GEMV packs (out, in / 8) in another order; not read
PACKED_SUFFIXES = ("qweight", "qzeros", "scales", "g_idx")


@dataclass(frozen=True)
class PackedFormat:
    """How one checkpoint packs its linear layers."""

    method: str  # "awq" | "gptq"
    bits: int
    group_size: int  # -1: one group over all inputs (GPTQ's per-channel)
    zero_offset: int  # added to a stored zero: 1 for GPTQ v1, else 0

    def describe(self) -> str:
        group = "per channel" if self.group_size == -1 else f"g{self.group_size}"
        zeros = ", v1 zeros (+1)" if self.zero_offset else ""
        return f"{self.method} {self.bits}-bit {group}{zeros}"


def packed_format(config: Mapping[str, Any], source: str) -> PackedFormat | None:
    """The packing a config.json's ``quantization_config`` declares, None when it declares
    none or another method (which the caller refuses); unsupported settings are errors."""
    quant = config.get("quantization_config")
    if not isinstance(quant, Mapping) or quant.get("quant_method") not in METHODS:
        return None
    method = str(quant["quant_method"])

    def field(key: str, default: Any, choices: tuple[Any, ...]) -> Any:
        value = quant.get(key, default)
        if value not in choices:
            raise CheckpointError(
                f"{source}: quantization_config.{key}: {value!r} is not supported for {method} "
                f"checkpoints; allowed: {allowed(map(str, choices))}"
            )
        return value

    group = quant.get("group_size", 128)
    if isinstance(group, bool) or not isinstance(group, int) or not (group == -1 or 0 < group <= 1 << 20):
        raise CheckpointError(
            f"{source}: quantization_config.group_size: {group!r} is not a group size "
            "(a positive integer, or -1 for one group per output column)"
        )
    if method == "awq":
        field("zero_point", True, (True,))
        field("version", "gemm", AWQ_VERSIONS)
        if group == -1:
            raise CheckpointError(f"{source}: quantization_config.group_size: -1 is not an AWQ group size")
        return PackedFormat("awq", field("bits", 4, (4,)), group, 0)
    bits = field("bits", 4, GPTQ_BITS)
    fmt = field("checkpoint_format", "gptq", tuple(GPTQ_FORMATS))
    return PackedFormat("gptq", bits, group, GPTQ_FORMATS[fmt])


def unpack_int32(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """Split each int32 into ``32 / bits`` fields, lowest bits first, along ``dim`` (0 or 1):
    (R, C) -> (R * 32 / bits, C) or (R, C * 32 / bits), int32 values in 0..2**bits - 1."""
    per = 32 // bits
    shifts = torch.arange(0, 32, bits, dtype=torch.int32)  # (per,)
    words = packed.to(torch.int32)
    if dim == 0:
        fields = (words[:, None, :] >> shifts[None, :, None]) & (2**bits - 1)  # (R, per, C)
        return fields.reshape(words.shape[0] * per, words.shape[1])
    fields = (words[:, :, None] >> shifts[None, None, :]) & (2**bits - 1)  # (R, C, per)
    return fields.reshape(words.shape[0], words.shape[1] * per)


def awq_columns(packed: torch.Tensor) -> torch.Tensor:
    """AWQ's column-packed int32 (R, C / 8) -> 4-bit values (R, C) in the columns' own order."""
    fields = unpack_int32(packed, 4, dim=1)  # (R, C): column 8c + k holds nibble k
    inverse = torch.empty(8, dtype=torch.long)
    inverse[list(AWQ_ORDER)] = torch.arange(8)  # column j of a word is nibble inverse[j]
    index = (torch.arange(fields.shape[1]) // 8) * 8 + inverse.repeat(fields.shape[1] // 8)  # (C,)
    return fields[:, index]


@dataclass(frozen=True)
class Groups:
    """One layer's integers in transformers' (out, in) orientation, group by group."""

    values: torch.Tensor  # (out, in) int32 in 0..2**bits - 1
    zeros: torch.Tensor  # (out, G) int32 zero points (GPTQ v1 offset applied)
    scales: torch.Tensor  # (out, G) float32
    group_of: torch.Tensor  # (in,) int64: the group of each input row


def expected_shapes(fmt: PackedFormat, in_features: int, out_features: int) -> dict[str, tuple[int, ...]]:
    """The packed tensors' shapes for an (out, in) linear layer."""
    group = in_features if fmt.group_size == -1 else fmt.group_size
    groups, per = -(-in_features // group), 32 // fmt.bits
    if fmt.method == "awq":
        return {
            "qweight": (in_features, out_features // per),
            "qzeros": (groups, out_features // per),
            "scales": (groups, out_features),
        }
    return {
        "qweight": (in_features // per, out_features),
        "qzeros": (groups, out_features // per),
        "scales": (groups, out_features),
        "g_idx": (in_features,),
    }


def unpack_groups(fmt: PackedFormat, tensors: Mapping[str, torch.Tensor], in_features: int) -> Groups:
    """The packed triple (and GPTQ's ``g_idx``) of one layer as integers, zeros and scales;
    shapes are checked by the caller (``expected_shapes``)."""
    group = in_features if fmt.group_size == -1 else fmt.group_size
    if fmt.method == "awq":
        values = awq_columns(tensors["qweight"]).T  # (out, in)
        zeros = awq_columns(tensors["qzeros"]).T  # (out, G)
    else:
        values = unpack_int32(tensors["qweight"], fmt.bits, dim=0).T  # (out, in)
        zeros = unpack_int32(tensors["qzeros"], fmt.bits, dim=1).T + fmt.zero_offset  # (out, G)
    trivial = torch.arange(in_features) // group  # (in,)
    group_of = tensors["g_idx"].long() if "g_idx" in tensors else trivial
    return Groups(values.contiguous(), zeros.contiguous(), tensors["scales"].float().T.contiguous(), group_of)


def dequantize(groups: Groups) -> torch.Tensor:
    """The float32 weight (out, in): ``(q - z[g(i)]) * s[g(i)]``, exact (small integers times
    float16 scales are exact in float32)."""
    zeros = groups.zeros[:, groups.group_of].float()  # (out, in)
    scales = groups.scales[:, groups.group_of]  # (out, in)
    return (groups.values.float() - zeros) * scales  # (out, in)


def pack_awq_columns(values: torch.Tensor) -> torch.Tensor:
    """The inverse of ``awq_columns``: 4-bit values (R, C) -> AWQ's int32 words (R, C / 8),
    column ``8c + AWQ_ORDER[k]`` in nibble ``k`` (how ``zoo quantize`` writes AWQ checkpoints)."""
    rows, cols = values.shape
    ordered = values.long().reshape(rows, cols // 8, 8)[:, :, list(AWQ_ORDER)]  # (R, C / 8, 8): nibble order
    shifts = torch.arange(0, 32, 4, dtype=torch.long)  # (8,)
    words = (ordered << shifts).sum(-1)  # (R, C / 8) in 0..2**32 - 1
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)  # the same bits as int32

"""AWQ / GPTQ checkpoints into zoo's int4 layout, for every family whose linear weights are
plain renames (the llama-like ones: Llama, Qwen2/3, Mistral, Phi-3's unfused layers...).

``load_weights`` asks the family's rules as if each packed layer ``P`` had a float
``P.weight``; each such rule that is a plain rename onto an ``nn.Linear`` is taken here and
the linear replaced, so no family knows about packing. Per layer, the most exact layout
that keeps the integers:

- ``int4``: 4-bit values whose groups are contiguous (AWQ; GPTQ without act-order, or with
  a ``g_idx`` that is the trivial ``i // group_size``): ``Int4Linear.from_groups`` keeps the
  values and writes ``w = q * s + (-z * s)`` per group; torch's kernel computes
  ``(q - 8) * s + zero`` with ``zero = (8 - z) * s``, exact for integer ``z`` in float32.
  A format group that is a multiple of a kernel group size (32..256) is split into kernel
  groups with repeated scales (GPTQ's per-channel ``group_size: -1`` too).
- ``int4, permuted inputs``: GPTQ act-order, whose ``g_idx`` puts exactly ``group_size``
  inputs in each group in some other order: the inputs sorted by group make the groups
  contiguous (``PermutedInt4Linear``), still exact and still packed.
- ``dequantized``: anything else (8- or 2-bit GPTQ, whose groups zoo's per-row int8 layout
  cannot hold; group sizes no kernel takes; uneven ``g_idx``): the weight is dequantized
  exactly (float32) into the model's dtype. ``model.weights_layout`` says which layers went
  which way, and ``stored_bytes`` counts the layouts as held.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from zoo.errors import CheckpointError
from zoo.files.atomic import write_text_atomic
from zoo.files.safe_io import load_json, read_text
from zoo.hub.config import checkpoint_family
from zoo.hub.family import tensor_rules
from zoo.hub.names import Rule
from zoo.hub.packed_formats import (
    PACKED_SUFFIXES,
    Groups,
    PackedFormat,
    dequantize,
    expected_shapes,
    pack_awq_columns,
    unpack_groups,
)
from zoo.hub.safetensors_io import SafetensorsFile, write_safetensors
from zoo.hub.save import save_pretrained
from zoo.quant import replace_linear
from zoo.quant.linear import INT4_GROUP_SIZES, Int4Linear, PermutedInt4Linear

INT_DTYPES = (torch.int32,)
SCALE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


def packed_prefixes(hf_keys: Collection[str]) -> set[str]:
    """Layer names ``P`` of the checkpoint's packed layers (those with ``P.qweight``)."""
    return {name.removesuffix(".qweight") for name in hf_keys if name.endswith(".qweight")}


def as_float_names(hf_keys: Collection[str]) -> set[str]:
    """The checkpoint's names with each packed layer's tensors seen as one float ``P.weight``:
    what the family's tensor rules expect."""
    prefixes = packed_prefixes(hf_keys)
    packed = {f"{p}.{s}" for p in prefixes for s in PACKED_SUFFIXES}
    return {n for n in hf_keys if n not in packed} | {f"{p}.weight" for p in prefixes}


def load_packed_layers(
    model: nn.Module, rules: list[Rule], located: Mapping[str, SafetensorsFile], fmt: PackedFormat
) -> tuple[list[Rule], set[str], str]:
    """Replace the linear of every rule that reads a packed layer; returns the other rules,
    the checkpoint tensors used, and the layout description for ``model.weights_layout``."""
    prefixes = packed_prefixes(located)
    rest, used, kinds = [], set(), Counter()
    for rule in rules:
        packed = [n for n in rule.hf if n.removesuffix(".weight") in prefixes and n.endswith(".weight")]
        if not packed:
            rest.append(rule)
            continue
        prefix = packed[0].removesuffix(".weight")
        module_name = rule.zoo[0].removesuffix(".weight")
        linear = model.get_submodule(module_name) if rule.zoo[0].endswith(".weight") else None
        if len(rule.hf) != 1 or len(rule.zoo) != 1 or not plain_linear(linear) or not moves_unchanged(rule):
            raise CheckpointError(
                f"{located[prefix + '.qweight'].path}: tensor {prefix + '.qweight'!r}: packed weights "
                f"load only into a plain linear layer; zoo parameter {rule.zoo[0]!r} is split or fused"
            )
        names = [f"{prefix}.{s}" for s in PACKED_SUFFIXES if f"{prefix}.{s}" in located]
        tensors = read_packed(prefix, located, fmt, linear.in_features, linear.out_features)
        layer, kind = packed_linear(fmt, unpack_groups(fmt, tensors, linear.in_features), linear)
        parent, _, child = module_name.rpartition(".")
        replace_linear(model.get_submodule(parent), child, layer)
        used.update(names)
        kinds[kind] += 1
    dtype = next(model.parameters()).dtype
    parts = ", ".join(f"{kind} x{count}" for kind, count in sorted(kinds.items()))
    return rest, used, f"{fmt.describe()} -> {parts}; the rest {str(dtype).removeprefix('torch.')}"


def plain_linear(module: nn.Module | None) -> bool:
    """A linear computing ``x W^T + b`` and nothing else (as ``zoo.quant.quantize`` takes)."""
    return isinstance(module, nn.Linear) and not any(module.children())


def moves_unchanged(rule: Rule) -> bool:
    """Whether a one-to-one rule copies the checkpoint tensor as it is (a rename, not a
    transpose or a split), the only case a packed layer can stand in for its float weight."""
    dest, source = torch.empty(1, 2), torch.empty(2, 1)
    pairs = list(rule.load([dest], [source]))
    return len(pairs) == 1 and pairs[0][0] is dest and pairs[0][1] is source


def read_packed(
    prefix: str, located: Mapping[str, SafetensorsFile], fmt: PackedFormat, in_features: int, out_features: int
) -> dict[str, torch.Tensor]:
    """One layer's packed tensors, copied out of the file after checking each one's dtype and
    shape against the layer (before anything is allocated)."""
    shapes = expected_shapes(fmt, in_features, out_features)
    per = 32 // fmt.bits
    tensors = {}
    for suffix, shape in shapes.items():
        name = f"{prefix}.{suffix}"
        if name not in located:
            if suffix == "g_idx":
                continue
            raise CheckpointError(
                f"{located[prefix + '.qweight'].path}: missing tensor {name!r} "
                f"(the {fmt.method} packing of {prefix!r} needs it)"
            )
        info = located[name].tensors[name]
        dtypes = SCALE_DTYPES if suffix == "scales" else INT_DTYPES
        where = f"{located[name].path}: tensor {name!r}"
        if info.dtype not in dtypes:
            raise CheckpointError(
                f"{where} has dtype {str(info.dtype).removeprefix('torch.')}; "
                f"expected {' or '.join(str(d).removeprefix('torch.') for d in dtypes)}"
            )
        if tuple(info.shape) != shape or in_features % per or out_features % per:
            raise CheckpointError(
                f"{where} has shape {list(info.shape)}; a {fmt.describe()} linear of "
                f"{in_features} inputs and {out_features} outputs stores {list(shape)}"
            )
        tensors[suffix] = located[name].view(name).clone()
    group = in_features if fmt.group_size == -1 else fmt.group_size
    if in_features % group:
        raise CheckpointError(
            f"{located[prefix + '.qweight'].path}: layer {prefix!r}: group_size {group} does not "
            f"divide its {in_features} inputs"
        )
    groups = in_features // group
    if "g_idx" in tensors and (tensors["g_idx"].min() < 0 or tensors["g_idx"].max() >= groups):
        raise CheckpointError(
            f"{located[prefix + '.g_idx'].path}: tensor {prefix + '.g_idx'!r} holds group indices "
            f"outside 0..{groups - 1}"
        )
    return tensors


def kernel_group(fmt: PackedFormat, in_features: int) -> int | None:
    """The largest kernel group size dividing the format's group, None if none does."""
    group = in_features if fmt.group_size == -1 else fmt.group_size
    return next((g for g in sorted(INT4_GROUP_SIZES, reverse=True) if group % g == 0), None)


def packed_linear(fmt: PackedFormat, groups: Groups, linear: nn.Linear) -> tuple[nn.Module, str]:
    """The layer holding one packed linear as exactly as zoo can, and its layout's name."""
    in_features = linear.in_features
    device, dtype = linear.weight.device, linear.weight.dtype
    kernel = kernel_group(fmt, in_features)
    group = in_features if fmt.group_size == -1 else fmt.group_size
    order = torch.argsort(groups.group_of, stable=True)  # (in,): inputs sorted by group
    contiguous = torch.equal(groups.group_of[order], torch.arange(in_features) // group)
    if fmt.bits != 4 or kernel is None or not contiguous or device.type not in ("cpu", "cuda"):
        with torch.no_grad():
            linear.weight.copy_(dequantize(groups).to(dtype))  # (out, in)
        return linear, f"dequantized to {str(dtype).removeprefix('torch.')}"
    repeat = group // kernel
    scales = groups.scales.repeat_interleave(repeat, dim=1)  # (out, in / kernel)
    offsets = -(groups.zeros.float() * groups.scales).repeat_interleave(repeat, dim=1)  # (out, in / kernel)
    bias = linear.bias
    if torch.equal(order, torch.arange(in_features)):
        layer: nn.Module = Int4Linear.from_groups(
            groups.values.to(device), scales.to(device), offsets.to(device), None, dtype
        )
        kind = "int4"
    else:
        values = groups.values[:, order]  # (out, in) in group order
        layer = PermutedInt4Linear.from_permuted_groups(
            order, values.to(device), scales.to(device), offsets.to(device), None, dtype
        )
        kind = "int4 with permuted inputs (act-order)"
    layer.bias = bias  # the float linear's own bias parameter, which its rule loads
    return layer, kind


def save_awq(model: nn.Module, layers: Mapping[str, Any], out: Path, group_size: int, source: Path | None) -> Path:
    """Write ``model`` as an AutoAWQ GEMM checkpoint: ``save_pretrained``'s folder with each
    quantized linear's ``P.weight`` replaced by ``P.qweight`` / ``P.qzeros`` / ``P.scales``
    (``layers``: zoo module name -> integers with ``values`` (out, in), ``zeros`` and
    ``scales`` (out, G)), ``quantization_config`` added, and the source's tokenizer files
    copied. zoo, transformers and AutoAWQ read it back."""

    save_pretrained(model, out)  # type: ignore[arg-type]
    config = load_json(read_text(out / "config.json", CheckpointError, "config"), CheckpointError, str(out))
    shapes = {n: p.shape for n, p in model.named_parameters()}
    hf_name = {
        r.zoo[0]: r.hf[0]
        for r in tensor_rules(checkpoint_family(config["model_type"]), shapes, ())
        if len(r.zoo) == 1 and len(r.hf) == 1 and moves_unchanged(r)
    }
    with SafetensorsFile(out / "model.safetensors") as file:
        tensors = {name: file.view(name).clone() for name in file.tensors}
    for name, q in layers.items():
        weight = hf_name.get(f"{name}.weight")
        if weight is None:
            raise CheckpointError(f"{out}: zoo layer {name!r} has no plain checkpoint tensor to pack into")
        prefix = weight.removesuffix(".weight")
        del tensors[weight]
        tensors[f"{prefix}.qweight"] = pack_awq_columns(q.values.T)  # (in, out / 8)
        tensors[f"{prefix}.qzeros"] = pack_awq_columns(q.zeros.T)  # (G, out / 8)
        tensors[f"{prefix}.scales"] = q.scales.T.contiguous()  # (G, out) float16
    write_safetensors(tensors, out / "model.safetensors", metadata={"format": "pt"})
    config["quantization_config"] = {
        "quant_method": "awq",
        "bits": 4,
        "group_size": group_size,
        "zero_point": True,
        "version": "gemm",
    }
    write_text_atomic(out / "config.json", json.dumps(config, indent=2) + "\n")
    for extra in TOKENIZER_FILES if source is not None else ():
        if (source / extra).is_file():
            shutil.copyfile(source / extra, out / extra)
    return out

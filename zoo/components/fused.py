"""Fused projections: several Linears that read the same input run as one product.

Attention's q, k and v projections (softmax attention's, and the kernel-attention kinds':
linear and Infini) and a gated FFN's gate and up projections all multiply the same
activations. As one Linear whose weight is the parts' weights stacked by rows, they cost one
kernel launch and one pass over the input instead of three (or two), which is what a
launch-bound GPU decode step and inductor's generated code gain from. The outputs
are the parts' outputs side by side, split back by width, so the result is the same
product, row for row (exact in float32: each output element is the same dot product).

A token mixer or FFN opts in by overriding ``fusable_projections()`` (declared on both
bases in ``zoo.specs.interfaces``, empty by default): ``{fused name: (part names...)}``, and runs
the group through ``project``. ``fuse_projections(model)`` fuses every group whose parts
stack by output rows (``linear.RowStackable``: plain Linears, zoo's int8 and CPU-layout int4
layers of one kind; others are left alone). It is an explicit step after loading: the
state dict keeps the unfused names (a state-dict hook splits each fused tensor back by rows,
a load pre-hook stacks loaded parts), so saving and loading work as before. The harness
applies it under ``--compile``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from zoo.components.linear import RowStackable
from zoo.files.host_memory import rehome, return_freed_memory
from zoo.specs.interfaces import FeedForward, TokenMixer

FUSED_SIZES = "_zoo_fused_sizes"  # per module: {fused name: (part names, output widths)}
QKV = ("q_proj", "k_proj", "v_proj")  # the query, key and value projections a mixer fuses as "qkv_proj"


def project(module: nn.Module, fused: str, parts: Sequence[str], x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The outputs of ``parts`` for ``x`` (..., in): one fused product split by width when
    ``module`` was fused, else each part in turn. Each output is (..., out_part)."""
    groups: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = getattr(module, FUSED_SIZES, {})
    if fused in groups:
        joint = getattr(module, fused)(x)  # (..., sum of widths)
        return tuple(joint.split_with_sizes(groups[fused][1], dim=-1))  # not Tensor.split's Python wrapper: 2 µs a call
    return tuple(getattr(module, name)(x) for name in parts)


def is_fused(module: nn.Module, fused: str) -> bool:
    """Whether ``module``'s group ``fused`` runs as one layer (``fuse_projections``)."""
    return fused in getattr(module, FUSED_SIZES, {})


def fuse_group(module: nn.Module, fused: str, parts: Sequence[str]) -> bool:
    """Replace ``module``'s projections ``parts`` by one layer ``fused`` stacking them by
    output rows (``RowStackable``: plain Linears, or quantized ones of one kind); False if
    they cannot be."""
    layers = [getattr(module, name, None) for name in parts]
    first = layers[0]
    if len(layers) < 2 or not isinstance(first, RowStackable):
        return False
    joint = first.stack_rows(layers)
    if joint is None:
        return False
    widths = tuple(int(p.out_features) for p in layers)  # type: ignore[union-attr]
    for name in parts:
        delattr(module, name)
    setattr(module, fused, joint)
    groups = getattr(module, FUSED_SIZES, None)
    if groups is None:
        groups = {}
        setattr(module, FUSED_SIZES, groups)
        module.register_state_dict_post_hook(_split_state)
        module.register_load_state_dict_pre_hook(_stack_state)
    groups[fused] = (tuple(parts), widths)
    return True


def _split_state(module: nn.Module, state: dict[str, Any], prefix: str, local_metadata: Any) -> None:
    """state_dict hook: each fused tensor (a weight, bias, packed rows, scales) back under the
    parts' names, split by output rows (copies, not views: safetensors refuses tensors that
    share storage)."""
    for fused, (parts, widths) in getattr(module, FUSED_SIZES, {}).items():
        head = f"{prefix}{fused}."
        for key in [k for k in state if k.startswith(head)]:
            kind = key[len(head) :]
            for name, piece in zip(parts, state.pop(key).split(widths, dim=0), strict=True):
                state[f"{prefix}{name}.{kind}"] = piece.clone()


def _stack_state(module: nn.Module, state: dict[str, Any], prefix: str, *args: Any) -> None:
    """load_state_dict pre-hook: parts' tensors stacked by output rows under the fused name."""
    for fused, (parts, _) in getattr(module, FUSED_SIZES, {}).items():
        head = f"{prefix}{parts[0]}."
        for kind in [k[len(head) :] for k in state if k.startswith(head)]:
            keys = [f"{prefix}{name}.{kind}" for name in parts]
            if all(k in state for k in keys):
                state[f"{prefix}{fused}.{kind}"] = torch.cat([state.pop(k) for k in keys], dim=0)


def fuse_projections(model: nn.Module) -> int:
    """Fuse every group a token mixer or FFN declares (``fusable_projections()``); the number fused.

    In place, after loading (and after any quantization, whose replaced Linears are left
    unfused). Idempotent: a fused group is not declared twice.
    """
    count = 0
    for module in list(model.modules()):
        if not isinstance(module, (TokenMixer, FeedForward)):
            continue
        done = getattr(module, FUSED_SIZES, {})
        for fused, parts in module.fusable_projections().items():
            if fused not in done and fuse_group(module, fused, parts):
                count += 1
    if count:
        rehome(model)  # the stacked weights beside the rest, in huge pages
        return_freed_memory()  # the parts' and the stacking's freed buffers
    return count


def unfused_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    """``named_parameters()`` under the unfused names: each fused weight (and bias) as its
    parts' tensors (copies), for writers that name tensors by parameter (``save_pretrained``)."""
    params: dict[str, torch.Tensor] = dict(model.named_parameters())
    for path, module in model.named_modules():
        prefix = f"{path}." if path else ""
        for fused, (parts, widths) in getattr(module, FUSED_SIZES, {}).items():
            for kind in ("weight", "bias"):
                tensor = params.pop(f"{prefix}{fused}.{kind}", None)
                if tensor is None:
                    continue
                for name, piece in zip(parts, tensor.split(widths, dim=0), strict=True):
                    params[f"{prefix}{name}.{kind}"] = piece.clone()
    return params

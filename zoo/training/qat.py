"""Quantization-aware training: fake-quantized weights with a straight-through estimator.

Each plain linear layer zoo.quant would quantize (``zoo.quant.quantize``'s targets) multiplies by the weight rounded
with zoo.quant's own maths (``quantize_int8``: symmetric per output row; ``quantize_int4``: asymmetric per group of
``group_size`` inputs, zoo's int4 layout), so the trained model computes what its
post-training-quantized copy will. Rounding has no useful gradient; the straight-through
estimator passes the gradient of the rounded weight to the float weight unchanged
(``w + (q(w) - w).detach()``), Bengio et al. 2013 / Jacob et al. 2018.

A layer keeps its class's forward and its float ``weight`` parameter by name (only reads of
``weight`` go through the quantizer), so checkpoints of a QAT run load into the plain model,
and ``zoo.quant.quantize`` of it gives the int8/int4 layers the run trained against.
Embeddings stay in float (a tied table is read raw by the embedding, quantized by the head).
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.errors import TrainingError
from zoo.quant import QUANTIZED, check_group_size
from zoo.quant.linear import quantize_int4, quantize_int8


def fake_quantize(weight: torch.Tensor, bits: str, group_size: int) -> torch.Tensor:
    """The weight zoo.quant's layer multiplies with, in the weight's dtype; gradient straight through."""
    with torch.no_grad():
        if bits == "int8":
            q, scales = quantize_int8(weight)
            rounded = q.float() * scales[:, None]  # (out, in)
        else:
            values, scale_zeros = quantize_int4(weight, group_size)  # (out, in), (G, out, 2)
            scale, zero = scale_zeros[..., 0].T, scale_zeros[..., 1].T  # (out, G) each
            groups = values.float().reshape(weight.shape[0], -1, group_size)  # (out, G, g)
            rounded = ((groups - 8) * scale[..., None] + zero[..., None]).reshape(weight.shape)  # (out, in)
    return weight + (rounded.to(weight.dtype) - weight).detach()  # (out, in)


def _fake_weight(self: nn.Linear) -> torch.Tensor:
    return fake_quantize(self._parameters["weight"], self.qat_bits, self.qat_group_size)  # (out, in)


_CLASSES: dict[type, type] = {}


def fake_quant_class(cls: type) -> type:
    """``cls`` with ``weight`` read through the fake quantizer: a class property shadows the
    parameter on reads, so the layer's own forward (a head's scale and bias included) runs
    unchanged, while the parameter keeps its name, its tying and its optimizer slot."""
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"FakeQuant{cls.__name__}", (cls,), {"weight": property(_fake_weight), "qat_base": cls})
    return _CLASSES[cls]


def apply_qat(model: nn.Module, bits: str, group_size: int | None = None) -> int:
    """Make every plain linear layer (zoo.quant's targets) fake-quantized, in place; the number
    of layers. ``bits``: int8 or int4; ``group_size``: int4's, zoo.quant's default."""
    if bits not in QUANTIZED:
        raise TrainingError(f"--qat: {bits!r} is not a quantized weights dtype; allowed: {', '.join(QUANTIZED)}")
    size = check_group_size(group_size)
    targets = [m for m in model.modules() if isinstance(m, nn.Linear) and not any(m.children())]
    for linear in targets:
        if bits == "int4" and linear.in_features % size:
            raise TrainingError(
                f"--qat int4: group size {size} does not divide in_features={linear.in_features}; "
                "choose a group size (32, 64, 128, 256) that divides every layer's input width"
            )
    for linear in targets:
        linear.qat_bits, linear.qat_group_size = bits, size
        linear.__class__ = fake_quant_class(type(linear))
    return len(targets)


def remove_qat(model: nn.Module) -> None:
    """Back to the plain layers (the float weights the run trained), e.g. before zoo.quant.quantize."""
    for module in model.modules():
        if type(module) in _CLASSES.values():
            module.__class__ = module.qat_base

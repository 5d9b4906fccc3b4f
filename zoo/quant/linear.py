"""Weight-only quantized linear layers: int8 per output channel, int4 group-wise.

Decode at batch 1 streams every weight once per token, so storing weights in fewer bytes
makes it faster only if the product reads those bytes directly, without first rebuilding a
full-width weight. The layers therefore keep the kernel's own packed layout as buffers and
call it on every forward (``zoo/quant/kernels.py``); ``dequantize()`` exists for tests,
fidelity checks and devices without a kernel.

- ``Int8Linear``: ``qweight`` int8 (out, in), symmetric, ``scales`` (out,) in the model's
  dtype; ``w ≈ q * scale`` with ``scale = max|w_row| / 127``.
- ``Int4Linear``: 4-bit values two per byte, per group of ``group_size`` inputs an asymmetric
  scale and offset (``w = q * scale + offset``, q in 0..15). On the CPU (and the meta device,
  whose shapes the analysis counts) zoo's own layout: ``packed`` (out, in / 2) uint8 and
  ``scale_offsets`` (out, G, 2), the rows of each panel of 16 interleaved, multiplied
  by zoo's kernel (zoo/quant/int4_cpu.py: for fewer than 24 token rows, decode, it quantizes
  the activation row to int8 per 32 inputs as llama.cpp does; for more it is the exact float
  product). On CUDA torch's tinygemm layout: ``packed`` and ``scale_zeros`` (G, out, 2) with
  ``(q - 8) * scale + zero``, the output dimension padded to a multiple of 16 (zeros, stored
  and counted, sliced off the output).

Bytes are the buffers' bytes (``stored_bytes``): scales and padding included. A layer is
quantized on the device it will run on (the layouts differ between CPU and CUDA); on the
meta device only the shapes are made, for exact analysis without memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from zoo.components import row_product
from zoo.components.linear import RowStackable, StepTensors
from zoo.quant import (  # the submodules, not `from zoo.quant import`: the package imports this file
    int4_cpu,
    int8_rows,
    kernels,
)

INT4_GROUP_SIZES = (32, 64, 128, 256)  # what tinygemm accepts (zoo's CPU kernel takes any multiple of 32)
INT4_ROW_MULTIPLE = 16  # tinygemm's layout pads the output rows to a multiple of 16


class QuantizedLinear(nn.Module, RowStackable):
    """Common part: shapes, bias, bytes; subclasses hold the packed weight and scales."""

    @classmethod
    def stack_rows(cls, parts: Sequence[nn.Module]) -> QuantizedLinear | None:
        """None: a subclass whose tensors stack by output rows says how (``RowStackable``)."""
        return None

    @classmethod
    def _stackable(cls, parts: Sequence[nn.Module], *tensors: str) -> list[QuantizedLinear] | None:
        """``parts`` when all are exactly ``cls`` with one input width, bias choice, and the
        named tensors' dtypes, devices (not meta) and shapes past the rows alike; else None."""
        ours = [p for p in parts if type(p) is cls and isinstance(p, QuantizedLinear)]
        if len(ours) != len(parts):
            return None
        first = ours[0]
        for p in ours:
            if p.in_features != first.in_features or (p.bias is None) != (first.bias is None):
                return None
            for name in tensors:
                t, t0 = getattr(p, name), getattr(first, name)
                if t.dtype != t0.dtype or t.device != t0.device or t.is_meta or t.shape[1:] != t0.shape[1:]:
                    return None
        return ours

    @staticmethod
    def _stacked_bias(parts: Sequence[QuantizedLinear]) -> torch.Tensor | None:
        return None if parts[0].bias is None else torch.cat([p.bias for p in parts if p.bias is not None])

    bits: int

    def __init__(self, in_features: int, out_features: int, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    def stored_bytes(self) -> int:
        """Bytes this layer stores: packed weight, scales (and zeros), bias."""
        tensors = list(self.buffers(recurse=False)) + list(self.parameters(recurse=False))
        return sum(t.numel() * t.element_size() for t in tensors)

    def dense_bytes(self, dtype: torch.dtype) -> int:
        """Bytes of the same layer unquantized in ``dtype`` (weight and bias)."""
        bias = 0 if self.bias is None else self.out_features
        return (self.in_features * self.out_features + bias) * dtype.itemsize

    def _biased(self, out: torch.Tensor) -> torch.Tensor:
        """The kernel's product (..., out) plus the bias, where the layer has one."""
        return out if self.bias is None else out + self.bias.to(out.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Int8Linear(QuantizedLinear):
    """int8 weights, one symmetric scale per output channel."""

    bits = 8

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, scale_dtype: torch.dtype) -> None:
        out_features, in_features = weight.shape
        super().__init__(in_features, out_features, bias)
        if weight.device.type == "meta":
            qweight = torch.empty(out_features, in_features, dtype=torch.int8, device="meta")
            scales = torch.empty(out_features, dtype=scale_dtype, device="meta")
        else:
            qweight, scales = quantize_int8(weight)
            scales = scales.to(scale_dtype)
        self.register_buffer("qweight", qweight)  # (out, in) int8
        self.register_buffer("scales", scales)  # (out,)

    @classmethod
    def from_rows(
        cls, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None, scale_dtype: torch.dtype
    ) -> Int8Linear:
        """A layer holding given int8 rows (out, in) and their scales (out,) exactly: how a
        GGUF's 8-bit matrix loads, re-quantized a slice at a time (zoo/hub/gguf/quantized.py)."""
        layer = cls(torch.empty(qweight.shape, device="meta"), bias, scale_dtype)
        layer.qweight, layer.scales = qweight, scales.to(scale_dtype)
        return layer

    @classmethod
    def stack_rows(cls, parts: Sequence[nn.Module]) -> Int8Linear | None:
        ours = cls._stackable(parts, "qweight", "scales")
        if ours is None:
            return None
        qweight = torch.cat([p.qweight for p in ours])  # (sum out, in) int8
        scales = torch.cat([p.scales for p in ours])  # (sum out,)
        return cls.from_rows(qweight, scales, cls._stacked_bias(ours), scales.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = kernels.int8_matmul(x, self.qweight, self.scales)  # (..., out)
        return self._biased(out)

    def step_tensors(self) -> StepTensors | None:
        """(int8 rows, scales, bias) where zoo's int8 row kernel takes this layer's one-row
        products (``int8_rows.applies``: switched on, ``int8_rows.MIN_WEIGHT_BYTES`` and up), as
        ``forward`` would take them; read from nn.Module's dicts (``Linear.step_tensors``)."""
        buffers = self._buffers
        qweight = buffers["qweight"]
        if qweight is None or qweight.numel() < int8_rows.MIN_WEIGHT_BYTES or not int8_rows.enabled():
            return None
        return qweight, buffers["scales"], self._parameters.get("bias")

    def kernel_rows(self) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """(int8 rows, scales) where the layer has no bias (``RowStackable.kernel_rows``)."""
        buffers = self._buffers
        if self._parameters.get("bias") is not None or buffers["qweight"] is None:
            return None
        return buffers["qweight"], buffers["scales"]

    def dequantize(self) -> torch.Tensor:
        """The weight the kernel multiplies with (out, in), in float32."""
        return self.qweight.float() * self.scales.float()[:, None]  # (out, in)


class Int4Linear(QuantizedLinear):
    """4-bit weights, an asymmetric scale and offset per group of ``group_size`` inputs.

    The layout follows the device the layer is made on (``cuda_layout``): on the CPU (and the
    meta device) zoo's panels of 16 rows read by its own kernel (zoo/quant/int4_cpu.py), on
    CUDA torch's tinygemm layout (module doc)."""

    bits = 4

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None, scale_dtype: torch.dtype, group_size: int
    ) -> None:
        out_features, in_features = weight.shape
        super().__init__(in_features, out_features, bias)
        self.group_size = group_size
        self.cuda_layout = weight.device.type == "cuda"
        if weight.device.type == "meta":  # the CPU layout's shapes
            packed = torch.empty(out_features, in_features // 2, dtype=torch.uint8, device="meta")
            scale_offsets = torch.empty(out_features, in_features // group_size, 2, dtype=scale_dtype, device="meta")
            self.register_buffer("packed", packed)  # (out, in / 2) uint8
            self.register_buffer("scale_offsets", scale_offsets)  # (out, G, 2)
            return
        values, scale_zeros = quantize_int4(weight, group_size)  # (out, in), (G, out, 2): zero at q = 8
        scales = scale_zeros[..., 0].T  # (out, G)
        self._hold(values, scales, scale_zeros[..., 1].T - 8 * scales, scale_dtype)

    def _hold(
        self, values: torch.Tensor, scales: torch.Tensor, offsets: torch.Tensor, scale_dtype: torch.dtype
    ) -> None:
        """Pack values (out, in) in 0..15 with scales and offsets (out, G), ``w = q * s + o``,
        into this device's layout, replacing the buffers a meta layer was made with."""
        self._buffers.clear()
        if not self.cuda_layout:
            int4_cpu.load()  # built (once) and its op registered before any graph is traced
            so = torch.stack([scales, offsets], -1).to(scale_dtype)  # (out, G, 2)
            packed, so = int4_cpu.pack(values, so)  # panels of 16 rows interleaved
            self.register_buffer("packed", packed)  # (out, in / 2) uint8
            self.register_buffer("scale_offsets", so)  # (out, G, 2)
            return
        padded = -(-self.out_features // INT4_ROW_MULTIPLE) * INT4_ROW_MULTIPLE
        full = values.new_zeros(padded, self.in_features)  # (out padded, in): padded rows are zeros
        full[: self.out_features] = values
        scale_zeros = scales.new_zeros(scales.shape[1], padded, 2)  # (G, out padded, 2)
        scale_zeros[:, : self.out_features, 0] = scales.T
        scale_zeros[:, : self.out_features, 1] = (offsets + 8 * scales).T  # tinygemm computes (q - 8) * scale + zero
        self.register_buffer("packed", kernels.int4_pack(full.to(torch.int32)))  # tinygemm's layout
        self.register_buffer("scale_zeros", scale_zeros.to(scale_dtype))  # (G, out padded, 2)

    @classmethod
    def from_groups(
        cls,
        values: torch.Tensor,
        scales: torch.Tensor,
        offsets: torch.Tensor,
        bias: torch.Tensor | None,
        scale_dtype: torch.dtype,
    ) -> Int4Linear:
        """A layer holding given 4-bit values exactly: ``w = values * scale + offset`` per group
        of ``in / G`` inputs; values (out, in) in 0..15, scales and offsets (out, G). How a
        GGUF's Q4_0 / Q4_1 / Q4_K blocks load without re-quantizing (zoo/hub/gguf/quantized.py)."""
        out_features, in_features = values.shape
        group_size = in_features // scales.shape[1]
        layer = cls(torch.empty(out_features, in_features, device="meta"), None, scale_dtype, group_size)
        layer.cuda_layout = values.device.type == "cuda"
        layer._hold(values, scales, offsets, scale_dtype)
        layer.bias = None if bias is None else torch.nn.Parameter(bias.detach().clone(), requires_grad=False)
        return layer

    @classmethod
    def stack_rows(cls, parts: Sequence[nn.Module]) -> Int4Linear | None:
        """The CPU layout's panels stack (tinygemm's tiles do not) where every part but the last
        fills whole panels: the stack's state then splits back into the parts' own bytes.
        Asked first whether a part holds tinygemm's layout, which has no ``scale_offsets``."""
        if any(isinstance(p, Int4Linear) and p.cuda_layout for p in parts):
            return None
        ours = cls._stackable(parts, "packed", "scale_offsets")
        if ours is None or any(p.out_features % int4_cpu.PANEL for p in ours[:-1]):
            return None
        rows = [int4_cpu.unpack(p.packed, p.scale_offsets) for p in ours]  # per part (values, so) by row
        values = torch.cat([v for v, _ in rows])  # (sum out, in) in 0..15
        so = torch.cat([so for _, so in rows])  # (sum out, G, 2)
        return cls.from_groups(values, so[..., 0], so[..., 1], cls._stacked_bias(ours), so.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cuda_layout:  # tinygemm: rows (M, in), outputs padded
            rows = x.reshape(-1, self.in_features)  # (M, in)
            out = kernels.int4_matmul(rows, self.packed, self.group_size, self.scale_zeros)[:, : self.out_features]
            return self._biased(out.reshape(*x.shape[:-1], self.out_features))  # (..., out)
        return self._biased(int4_cpu.matmul(x, self.packed, self.scale_offsets))  # (..., out): x's leading dims kept

    def kernel_rows(self) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """(panels, scale_offsets) on the CPU layout without a bias, where the int4 kernel and the
        one-row products' extension, which a fused kernel calls it through, are built
        (``RowStackable.kernel_rows``: Mamba's x_proj inside its fused step)."""
        if self.cuda_layout or self._parameters.get("bias") is not None:
            return None
        if not int4_cpu.EXTENSION.available() or not row_product.available():
            return None
        return self._buffers["packed"], self._buffers["scale_offsets"]

    def step_tensors(self) -> StepTensors | None:
        """(panels, scale_offsets, bias) on the CPU layout where its kernel is built: a layer
        step's int4 product is ``forward``'s (``int4_q8`` for one row); read from nn.Module's
        dicts (``Linear.step_tensors``)."""
        if self.cuda_layout or not int4_cpu.EXTENSION.available():
            return None
        buffers = self._buffers
        return buffers["packed"], buffers["scale_offsets"], self._parameters.get("bias")  # type: ignore[return-value]

    def dequantize(self) -> torch.Tensor:
        """The weight the kernel multiplies with (out, in), in float32. On CUDA it is read back
        through the kernel itself (an identity input), so it holds whatever tinygemm packs."""
        if not self.cuda_layout:
            return int4_cpu.dequantize(self.packed, self.scale_offsets)  # (out, in)
        eye = torch.eye(self.in_features, device=self.packed.device)  # (in, in)
        columns = kernels.int4_matmul(eye, self.packed, self.group_size, self.scale_zeros.float())  # (in, out padded)
        return columns.float().T[: self.out_features].contiguous()  # (out, in)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", group_size={self.group_size}"


class PermutedInt4Linear(Int4Linear):
    """Int4 weights whose groups are contiguous only in a permuted order of the inputs.

    GPTQ with act-order (``desc_act``) quantizes input rows in order of decreasing Hessian
    diagonal, so its group index ``g_idx`` is not monotone in the input position. Sorting the
    inputs by group makes every group contiguous again; the layer keeps the weight in that
    order and gathers the input columns the same way (``input_order``, int32 (in,)), so
    ``x[:, order] @ W[:, order].T == x @ W.T`` exactly, with the packed 4-bit values kept.
    """

    @classmethod
    def from_permuted_groups(
        cls,
        order: torch.Tensor,
        values: torch.Tensor,
        scales: torch.Tensor,
        offsets: torch.Tensor,
        bias: torch.Tensor | None,
        scale_dtype: torch.dtype,
    ) -> PermutedInt4Linear:
        """``values`` (out, in), ``scales``/``offsets`` (out, G) already in the order ``order`` (in,)."""
        layer = cls.from_groups(values, scales, offsets, bias, scale_dtype)
        layer.register_buffer("input_order", order.to(device=layer.packed.device, dtype=torch.int32))  # (in,)
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.index_select(-1, self.input_order))  # (..., in) in group order

    def dequantize(self) -> torch.Tensor:
        """The weight in the inputs' own order (out, in), float32."""
        permuted = super().dequantize()  # (out, in) in group order
        weight = torch.empty_like(permuted)
        weight[:, self.input_order.long()] = permuted
        return weight


class Int8Embedding(nn.Module):
    """An input table of int8 rows: row ``i`` is ``qweight[i] * scales[i]``.

    A tied int8 model passes its LM head's own buffers (the same tensors), so the matrix is
    stored once, as before quantizing; ``from_table`` quantizes a table of its own (a tied
    int4 model, whose packed head cannot be read by rows).
    """

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("qweight", qweight)  # (vocab, d) int8
        self.register_buffer("scales", scales)  # (vocab,)

    @classmethod
    def from_table(cls, table: torch.Tensor) -> Int8Embedding:
        if table.device.type == "meta":
            qweight = torch.empty(table.shape, dtype=torch.int8, device="meta")
            return cls(qweight, torch.empty(table.shape[0], dtype=table.dtype, device="meta"))
        qweight, scales = quantize_int8(table)
        return cls(qweight, scales.to(table.dtype))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = F.embedding(ids, self.qweight).to(self.scales.dtype)  # (..., d)
        return rows * self.scales[ids][..., None]  # (..., d)


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: (q (out, in) int8, scales (out,) float32)."""
    w = weight.float()  # (out, in)
    scales = (w.abs().amax(dim=1) / 127).clamp(min=torch.finfo(torch.float32).tiny)  # (out,)
    q = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)  # (out, in)
    return q, scales


def quantize_int4(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric group-wise 4-bit: (values (out, in) int32 in 0..15, scale_zeros (in / g, out, 2)).

    Each group's range [min, max] maps onto 0..15; torch's kernels compute
    ``(q - 8) * scale + zero``, so zero is the value at q = 8: ``min + 8 * scale``.
    """
    out_features, in_features = weight.shape
    groups = weight.float().reshape(out_features, in_features // group_size, group_size)  # (out, G, g)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)  # (out, G)
    scales = ((high - low) / 15).clamp(min=1e-8)  # (out, G)
    values = torch.round((groups - low[..., None]) / scales[..., None]).clamp(0, 15)  # (out, G, g)
    zeros = low + 8 * scales  # (out, G)
    scale_zeros = torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous()  # (G, out, 2)
    return values.to(torch.int32).reshape(out_features, in_features), scale_zeros

"""Reading a GGUF file (llama.cpp's format) through the ``gguf`` library: metadata and tensors.

The file is memory-mapped and its header read by ``zoo.hub.gguf.header`` (every size checked
against the file before use); nothing in it is executed. Each tensor is
dequantized on request (``gguf.quants.dequantize``) into a torch tensor in PyTorch's
(row-major, outermost first) shape, one tensor at a time, so peak memory is about one
dequantized model plus one float32 tensor. Quantization types outside ``READABLE`` are a
``CheckpointError`` naming the tensor and its type, never a silently wrong weight.

``gguf`` is an optional dependency (``pip install zoo[gguf]``): it is imported here only.
"""

from __future__ import annotations

import math
import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from zoo.errors import CheckpointError
from zoo.files.safe_io import bounded_repr, open_regular
from zoo.hub.gguf.header import TensorInfo, read_header

# every type gguf-py's ``gguf.quants.dequantize`` reads (MXFP4: how llama.cpp stores gpt-oss
# experts); Q8_1, Q8_K (llama.cpp's activation-only types), integers and F64 are refused by name
READABLE = (
    "F32",
    "F16",
    "BF16",
    "Q8_0",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q2_K",
    "Q3_K",
    "Q4_K",
    "Q5_K",
    "Q6_K",
    "IQ1_S",
    "IQ1_M",
    "IQ2_XXS",
    "IQ2_XS",
    "IQ2_S",
    "IQ3_XXS",
    "IQ3_S",
    "IQ4_NL",
    "IQ4_XS",
    "TQ1_0",
    "TQ2_0",
    "MXFP4",
    "NVFP4",
)
INSTALL_HINT = "reading GGUF files needs the gguf library: pip install zoo[gguf]"


def import_gguf() -> Any:
    """The ``gguf`` module, or a CheckpointError saying how to install it."""
    try:
        import gguf
    except ImportError:
        raise CheckpointError(INSTALL_HINT) from None
    return gguf


_MISSING: Any = object()
MAX_INT = (1 << 31) - 1  # a size or id read from metadata: int32 range, as llama.cpp reads them


class GGUFCheckpoint:
    """One GGUF file: ``metadata`` (key -> value; numeric arrays as read-only numpy views) and
    ``tensors`` (name -> checked ``TensorInfo``). Families read metadata only through the typed
    accessors below (``integer``, ``number``, ``text``, ...), which check the type and bounds
    and name the key and value in a one-line error: one checked reader for every family."""

    def __init__(self, path: str | Path) -> None:
        import_gguf()
        self.path = Path(path)
        fd = open_regular(self.path, CheckpointError, "GGUF file")
        try:
            size = os.fstat(fd).st_size
            if size < 24:
                raise CheckpointError(
                    f"{self.path}: not a readable GGUF file ({size} bytes; a GGUF header is at least 24)"
                )
            self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        header = read_header(self._map, self.path)
        self.metadata: dict[str, Any] = header.metadata
        self.tensors: dict[str, TensorInfo] = header.tensors
        parts = self.integer("split.count", 1)
        if parts > 1:
            raise CheckpointError(
                f"{self.path}: split.count: a GGUF split in {parts} parts is not supported; "
                "merge it first (llama.cpp's gguf-split --merge)"
            )

    # ---- typed metadata ------------------------------------------------------------------
    def _lie(self, key: str, value: Any, what: str) -> CheckpointError:
        shown = f"an array of {len(value):,} items" if isinstance(value, (list, np.ndarray)) else bounded_repr(value)
        return CheckpointError(f"{self.path}: {key}: {shown}; allowed: {what}")

    def _default(self, key: str, default: Any) -> Any:
        if default is _MISSING:
            raise CheckpointError(f"{self.path}: {key}: required but missing")
        return default

    def integer(self, key: str, default: Any = _MISSING, low: int = 0, high: int = MAX_INT) -> Any:
        """An integer in [low, high] (a boolean, float, string or array is refused)."""
        if key not in self.metadata:
            return self._default(key, default)
        value = self.metadata[key]
        if type(value) is not int or not low <= value <= high:
            raise self._lie(key, value, f"an integer from {low:,} to {high:,}")
        return value

    def number(self, key: str, default: Any = _MISSING, low: float = -math.inf, high: float = math.inf) -> Any:
        """A finite number in [low, high]."""
        if key not in self.metadata:
            return self._default(key, default)
        value = self.metadata[key]
        if type(value) not in (int, float) or not math.isfinite(value) or not low <= value <= high:
            raise self._lie(key, value, f"a finite number from {low} to {high}")
        return float(value)

    def text(self, key: str, default: Any = _MISSING) -> Any:
        if key not in self.metadata:
            return self._default(key, default)
        value = self.metadata[key]
        if not isinstance(value, str):
            raise self._lie(key, value, "a string")
        return value

    def flag(self, key: str, default: Any = _MISSING) -> Any:
        if key not in self.metadata:
            return self._default(key, default)
        value = self.metadata[key]
        if not (type(value) is bool or (type(value) is int and value in (0, 1))):
            raise self._lie(key, value, "a boolean")
        return bool(value)

    def strings(self, key: str, default: Any = _MISSING) -> Any:
        if key not in self.metadata:
            return self._default(key, default)
        value = self.metadata[key]
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise self._lie(key, value, "an array of strings")
        return value

    def numbers(self, key: str, default: Any = _MISSING, integers: bool = False) -> Any:
        """A numeric array as float64 (or int64 with ``integers``), every item finite."""
        if key not in self.metadata:
            return self._default(key, default)
        value = self.metadata[key]
        kinds = "iu" if integers else "iuf"
        if not isinstance(value, np.ndarray) or value.dtype.kind not in kinds:
            raise self._lie(key, value, f"an array of {'integers' if integers else 'numbers'}")
        out = value.astype(np.int64 if integers else np.float64)
        if not integers and not np.isfinite(out).all():
            raise self._lie(key, value, "finite numbers")
        return out

    def token_id(self, key: str, vocab: int) -> int | None:
        """A token id named by the metadata, checked against the vocabulary's size."""
        return self.integer(key, None, 0, vocab - 1)

    # ---- the architecture's keys ---------------------------------------------------------
    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise CheckpointError(f"{self.path}: general.architecture: required but missing (or not a string)")
        return arch

    def arch(self, key: str) -> str:
        """The full key of ``{arch}.key`` (e.g. ``llama.block_count``)."""
        return f"{self.architecture}.{key}"

    def has_tensor(self, name: str) -> bool:
        return name in self.tensors

    def info(self, name: str) -> TensorInfo:
        if name not in self.tensors:
            raise CheckpointError(f"{self.path}: missing tensor {name!r}")
        return self.tensors[name]

    def shape(self, name: str) -> tuple[int, ...]:
        """A tensor's PyTorch shape (outermost first; GGUF lists dimensions innermost first)."""
        return self.info(name).shape

    def type_name(self, name: str) -> str:
        from gguf.constants import GGMLQuantizationType

        return GGMLQuantizationType(self.info(name).type_id).name

    def check_types(self) -> None:
        """Every tensor's type readable, else one error naming the first tensor that is not."""
        for name in self.tensors:
            self._check_type(name)

    def _check_type(self, name: str) -> None:
        kind = self.type_name(name)
        if kind not in READABLE:
            raise CheckpointError(
                f"{self.path}: tensor {name!r} has quantization type {kind}, which zoo cannot read; "
                f"allowed: {', '.join(READABLE)}"
            )

    def raw(self, name: str) -> np.ndarray:
        """A tensor's stored bytes (a read-only view of the file; the range was checked when
        the header was read), for loaders that keep the file's own blocks."""
        info = self.info(name)
        return np.frombuffer(self._map, dtype=np.uint8, count=info.nbytes, offset=info.start)

    def rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` of a 2-D tensor dequantized to float32 (out, in): a large
        matrix re-quantized a slice at a time never has a float copy of the whole."""
        gguf = import_gguf()
        self._check_type(name)
        info = self.info(name)
        qtype = gguf.GGMLQuantizationType(info.type_id)
        blocks = self.raw(name).reshape(gguf.quants.quant_shape_to_byte_shape(info.shape, qtype))  # (out, bytes)
        values = gguf.quants.dequantize(blocks[start:stop], qtype)  # F32: a view of the read-only map
        return torch.from_numpy(np.array(values, dtype=np.float32)).reshape(-1, info.shape[-1])  # a copy

    def tensor(self, name: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The tensor dequantized to ``dtype``, in PyTorch's shape (a fresh copy)."""
        gguf = import_gguf()
        self._check_type(name)
        info = self.info(name)
        qtype = gguf.GGMLQuantizationType(info.type_id)
        raw = np.frombuffer(self._map, dtype=np.uint8, count=info.nbytes, offset=info.start)  # bytes checked in range
        values = gguf.quants.dequantize(raw.reshape(gguf.quants.quant_shape_to_byte_shape(info.shape, qtype)), qtype)
        if qtype.name == "F32":  # a view of the read-only map: copy it out
            values = values.copy()
        out = torch.from_numpy(values).reshape(info.shape)
        return out.to(dtype)

"""Reading safetensors files tensor by tensor through a memory map, and writing them whole.

The reader parses the header itself (8-byte length, JSON, raw little-endian data) so every
problem — a truncated file, a corrupt header, a tensor whose bytes do not fit its shape —
is a ``CheckpointError`` naming the file and the tensor. Nothing is ever unpickled. Each
tensor is a zero-copy view into the map; after the caller has copied it into the model, the
pages are released (``MADV_DONTNEED``) so the file's pages do not add a second full copy of
the weights to the process's resident memory.
"""

from __future__ import annotations

import mmap
import os
import struct
import warnings
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import save_file

from zoo.errors import CheckpointError
from zoo.files.atomic import atomic_path
from zoo.files.safe_io import bounded_repr, load_json, open_regular

SAFETENSORS_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_MAX_HEADER = 100 * 1024 * 1024


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _short(value: object) -> str:
    return bounded_repr(value, 80)


class TensorInfo:
    """Where one tensor lives in its file."""

    __slots__ = ("name", "dtype", "shape", "start", "end")

    def __init__(self, name: str, dtype: torch.dtype, shape: tuple[int, ...], start: int, end: int) -> None:
        self.name, self.dtype, self.shape, self.start, self.end = name, dtype, shape, start, end


class SafetensorsFile:
    """One safetensors file, memory-mapped read-only; use as a context manager."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.tensors: dict[str, TensorInfo] = {}
        self.metadata: dict[str, str] = {}
        self._file = None
        self._map: mmap.mmap | None = None
        self._data_start = 0
        self._read_header()

    # ---- header ---------------------------------------------------------------------------
    def _fail(self, message: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: {message}")

    def _read_header(self) -> None:
        fd = open_regular(self.path, CheckpointError, "safetensors file")  # a FIFO would block forever
        try:
            with os.fdopen(fd, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                prefix = handle.read(8)
                if len(prefix) < 8:
                    raise self._fail("not a safetensors file (shorter than its 8-byte header length)")
                (header_len,) = struct.unpack("<Q", prefix)
                if header_len > _MAX_HEADER or 8 + header_len > size:
                    raise self._fail(f"corrupt or truncated: header of {header_len} bytes, file of {size} bytes")
                raw = handle.read(header_len)
        except OSError as exc:
            raise CheckpointError(f"{self.path}: cannot read ({exc.strerror})") from None

        header = load_json(raw, CheckpointError, f"{self.path}: corrupt safetensors header")  # duplicate keys refused
        if not isinstance(header, dict):
            raise self._fail("corrupt safetensors header (not a JSON object)")
        self._data_start = 8 + header_len
        data_size = size - self._data_start
        metadata = header.pop("__metadata__", None) or {}
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise self._fail(f"__metadata__: expected an object of strings, got {_short(metadata)}")
        self.metadata = dict(metadata)
        for name, entry in header.items():
            self.tensors[name] = self._tensor_info(name, entry, data_size)
        self._check_no_overlap()

    def _tensor_info(self, name: str, entry: object, data_size: int) -> TensorInfo:
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise self._fail(
                f"tensor {name!r}: corrupt header entry {_short(entry)}; expected dtype, shape and data_offsets"
            )
        dtype_name, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if not isinstance(dtype_name, str) or dtype_name not in SAFETENSORS_DTYPES:
            raise self._fail(
                f"tensor {name!r}: dtype {_short(dtype_name)} is not supported; allowed: "
                f"{', '.join(SAFETENSORS_DTYPES)}"
            )
        if not isinstance(shape, list) or not all(_is_count(s) for s in shape):
            raise self._fail(f"tensor {name!r}: shape must be a list of non-negative integers, got {_short(shape)}")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets):
            raise self._fail(f"tensor {name!r}: data_offsets must be two non-negative integers, got {_short(offsets)}")
        start, end = offsets
        dtype = SAFETENSORS_DTYPES[dtype_name]
        numel = 1
        for dim in shape:
            numel *= dim
        expected = numel * dtype.itemsize
        if not start <= end or end - start != expected:
            raise self._fail(
                f"tensor {name!r}: {end - start} bytes stored for shape {shape} {dtype_name} ({expected} expected)"
            )
        if end > data_size:
            raise self._fail(f"truncated: tensor {name!r} ends at byte {end} of a {data_size}-byte data section")
        return TensorInfo(name, dtype, tuple(shape), self._data_start + start, self._data_start + end)

    def _check_no_overlap(self) -> None:
        """Tensors may not share bytes (the safetensors library refuses such files too)."""
        previous: TensorInfo | None = None
        for info in sorted(self.tensors.values(), key=lambda t: (t.start, t.end)):
            if previous is not None and info.start < previous.end and info.end > info.start:
                raise self._fail(
                    f"tensors {previous.name!r} and {info.name!r} overlap in the data section "
                    f"(bytes {info.start - self._data_start}..{previous.end - self._data_start})"
                )
            if info.end > info.start and (previous is None or info.end > previous.end):
                previous = info

    # ---- data -----------------------------------------------------------------------------
    def __enter__(self) -> SafetensorsFile:
        self._file = os.fdopen(open_regular(self.path, CheckpointError, "safetensors file"), "rb")
        if self.path.stat().st_size > 0:
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def view(self, name: str) -> torch.Tensor:
        """A read-only, zero-copy tensor over the file's bytes; copy from it, do not keep it."""
        info = self.tensors[name]
        numel = (info.end - info.start) // max(info.dtype.itemsize, 1)
        if numel == 0:
            return torch.empty(info.shape, dtype=info.dtype)
        assert self._map is not None, "use SafetensorsFile as a context manager to read data"
        with warnings.catch_warnings():  # the map is read-only; callers only copy from it
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.frombuffer(self._map, dtype=info.dtype, count=numel, offset=info.start)
        return flat.view(info.shape)

    def release(self, name: str) -> None:
        """Drop the file pages of this tensor from the process's resident memory."""
        if self._map is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        info = self.tensors[name]
        start = info.start - info.start % mmap.PAGESIZE
        if info.end > start:
            self._map.madvise(mmap.MADV_DONTNEED, start, info.end - start)


def write_safetensors(
    tensors: Mapping[str, torch.Tensor], path: str | Path, metadata: Mapping[str, str] | None = None
) -> None:
    """Write a whole safetensors file atomically (temp file in the same folder + os.replace)."""

    path = Path(path)
    contiguous = {name: t.detach().contiguous().cpu() for name, t in tensors.items()}
    with atomic_path(path) as tmp:
        save_file(contiguous, str(tmp), metadata=dict(metadata or {}))

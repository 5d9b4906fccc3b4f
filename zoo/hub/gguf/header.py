"""A GGUF file's header read by zoo itself, every count, length and offset checked first.

``gguf.GGUFReader`` trusts the file: an array that declares 2**62 items is looped over (a
73-byte file hangs and grows memory), and an honest 8M-item array becomes 8M numpy parts.
This reader walks the same format (GGUF v2/v3, little-endian, as llama.cpp's ``gguf.cpp``
reads it) but checks each size against the bytes left in the file and against the limits
below before it allocates or loops; numeric arrays are one numpy view of the file (no loop);
strings must be UTF-8; nested arrays are refused (llama.cpp refuses them too). Tensor infos
are checked for a known type, 1..4 dimensions, rows that fill whole quantization blocks,
aligned offsets, data inside the file, unique names and no two tensors sharing bytes.

Every lie is one ``CheckpointError`` naming the file, the field and the value.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.errors import CheckpointError
from zoo.files.safe_io import bounded_repr

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_KEYS = 1 << 16  # metadata keys; a real file has a few dozen
MAX_TENSORS = 1 << 20  # a 1T-parameter MoE has about 10**5
MAX_STRING_ITEMS = 1 << 21  # vocabularies and merge lists: the largest real ones are ~500K
MAX_NAME = 1 << 16  # bytes of a key or tensor name
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ELEMENTS = 1 << 48  # elements of one tensor (far past any real one; the file size binds first)
DEFAULT_ALIGNMENT = 32

# GGUF value types: id -> (name, struct code); 8 is string, 9 array
SCALARS: dict[int, tuple[str, str]] = {
    0: ("uint8", "B"),
    1: ("int8", "b"),
    2: ("uint16", "H"),
    3: ("int16", "h"),
    4: ("uint32", "I"),
    5: ("int32", "i"),
    6: ("float32", "f"),
    7: ("bool", "?"),
    10: ("uint64", "Q"),
    11: ("int64", "q"),
    12: ("float64", "d"),
}
STRING, ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry: PyTorch shape (outermost first), ggml type id, absolute byte range."""

    name: str
    shape: tuple[int, ...]
    type_id: int
    start: int
    nbytes: int


@dataclass(frozen=True)
class Header:
    metadata: dict[str, Any]
    tensors: dict[str, TensorInfo]


class _Cursor:
    """Reads little-endian values from a buffer, refusing any read past its end."""

    def __init__(self, buf: Any, path: Path) -> None:
        self.buf, self.path, self.pos, self.size = buf, path, 0, len(buf)

    def fail(self, where: str, what: str) -> CheckpointError:
        if not where.isprintable() or len(where) > 120:  # a key from the file: shown escaped and short
            where = bounded_repr(where)
        return CheckpointError(f"{self.path}: {where}: {what}")

    def left(self) -> int:
        return self.size - self.pos

    def take(self, n: int, where: str) -> int:
        """Advance by ``n`` bytes (after checking they exist); the old position."""
        if n < 0 or n > self.left():
            raise self.fail(
                where,
                f"needs {n:,} bytes at offset {self.pos:,} but the file has {self.left():,} left "
                "(truncated or corrupt)",
            )
        start, self.pos = self.pos, self.pos + n
        return start

    def scalar(self, code: str, where: str) -> Any:
        size = struct.calcsize("<" + code)
        return struct.unpack_from("<" + code, self.buf, self.take(size, where))[0]

    def string(self, where: str, limit: int | None = None) -> str:
        n = self.scalar("Q", where)
        if limit is not None and n > limit:
            raise self.fail(where, f"a string of {n:,} bytes; at most {limit:,}")
        start = self.take(n, where)
        try:
            return bytes(self.buf[start : start + n]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(where, f"not UTF-8 text (bad byte at offset {start + exc.start:,})") from None


def read_header(buf: Any, path: Path) -> Header:
    """Parse and check the header of the GGUF file whose bytes are ``buf`` (a memory map)."""
    cur = _Cursor(buf, path)
    if cur.size < 4 or bytes(buf[:4]) != MAGIC:
        raise CheckpointError(f"{path}: not a readable GGUF file (no 'GGUF' magic at its start)")
    cur.take(4, "magic")
    version = cur.scalar("I", "version")
    if version not in VERSIONS:
        swapped = struct.unpack("<I", struct.pack(">I", version))[0]
        why = "a big-endian GGUF, which zoo does not read" if swapped in VERSIONS else f"{version}"
        raise CheckpointError(f"{path}: version: {why}; allowed: GGUF versions 2 and 3 (little-endian)")
    n_tensors, n_keys = cur.scalar("Q", "tensor_count"), cur.scalar("Q", "metadata_kv_count")
    _bound(cur, "metadata_kv_count", n_keys, MAX_KEYS, 8 + 4)
    _bound(cur, "tensor_count", n_tensors, MAX_TENSORS, 8 + 4 + 8 + 4 + 8)
    metadata: dict[str, Any] = {}
    for _ in range(n_keys):
        key = cur.string("metadata key", MAX_NAME)
        if key in metadata:
            raise cur.fail(key, "appears twice in the metadata")
        metadata[key] = _value(cur, key)
    infos = [_tensor_info(cur) for _ in range(n_tensors)]
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if type(alignment) is not int or alignment < 1 or alignment & (alignment - 1) or alignment > 1 << 30:
        shown = (
            f"an array of {len(alignment):,} items"
            if isinstance(alignment, (list, np.ndarray))
            else bounded_repr(alignment)
        )
        raise cur.fail("general.alignment", f"{shown}; allowed: a power of two")
    data_start = -(-cur.pos // alignment) * alignment
    return Header(metadata, _place(cur, infos, data_start, alignment))


def _bound(cur: _Cursor, where: str, count: int, limit: int, min_item: int) -> None:
    """A declared count: within ``limit`` and not more items than the bytes left could hold."""
    if count > limit:
        raise cur.fail(where, f"{count:,} items; at most {limit:,}")
    if count * min_item > cur.left():
        raise cur.fail(
            where,
            f"{count:,} items of at least {min_item} bytes each, but the file has "
            f"{cur.left():,} bytes left (truncated or corrupt)",
        )


def _value(cur: _Cursor, key: str) -> Any:
    type_id = cur.scalar("I", key)
    if type_id == STRING:
        return cur.string(key)
    if type_id in SCALARS:
        value = cur.scalar(SCALARS[type_id][1], key)
        return float(value) if SCALARS[type_id][1] in "fd" else value
    if type_id != ARRAY:
        raise cur.fail(key, f"unknown value type {type_id}")
    item_type, count = cur.scalar("I", key), cur.scalar("Q", key)
    if item_type == STRING:
        _bound(cur, key, count, MAX_STRING_ITEMS, 8)
        return [cur.string(key) for _ in range(count)]
    if item_type == ARRAY:
        raise cur.fail(key, "an array of arrays, which GGUF readers do not support")
    if item_type not in SCALARS:
        raise cur.fail(key, f"an array of unknown value type {item_type}")
    dtype = np.dtype("<" + SCALARS[item_type][1])
    _bound(cur, key, count, MAX_ELEMENTS, dtype.itemsize)
    start = cur.take(count * dtype.itemsize, key)
    return np.frombuffer(cur.buf, dtype=dtype, count=count, offset=start)  # a read-only view, no loop


def _tensor_info(cur: _Cursor) -> tuple[str, tuple[int, ...], int, int, int]:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    name = cur.string("tensor name", MAX_NAME)
    n_dims = cur.scalar("I", f"tensor {name!r}")
    if not 1 <= n_dims <= MAX_DIMS:
        raise cur.fail(f"tensor {name!r}", f"{n_dims} dimensions; allowed: 1 to {MAX_DIMS}")
    dims = [cur.scalar("Q", f"tensor {name!r}") for _ in range(n_dims)]  # innermost first
    type_id, offset = cur.scalar("I", f"tensor {name!r}"), cur.scalar("Q", f"tensor {name!r}")
    known = {int(t): t for t in GGML_QUANT_SIZES}
    if type_id not in known:
        raise cur.fail(f"tensor {name!r}", f"unknown ggml type {type_id}")
    elements = 1
    for d in dims:
        elements *= d
    if any(d < 1 for d in dims) or elements > MAX_ELEMENTS:
        raise cur.fail(
            f"tensor {name!r}", f"dimensions {dims}; each must be at least 1, at most {MAX_ELEMENTS:,} elements in all"
        )
    block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(type_id)]
    if dims[0] % block:
        raise cur.fail(
            f"tensor {name!r}", f"rows of {dims[0]} values do not fill whole {known[type_id].name} blocks of {block}"
        )
    return name, tuple(reversed(dims)), type_id, offset, elements // block * type_size


def _place(cur: _Cursor, infos: list[Any], data_start: int, alignment: int) -> dict[str, TensorInfo]:
    """Absolute byte ranges: aligned, inside the file, unique names, no two overlapping."""
    tensors: dict[str, TensorInfo] = {}
    for name, shape, type_id, offset, nbytes in infos:
        where = f"tensor {name!r}"
        if name in tensors:
            raise cur.fail(where, "appears twice")
        if offset % alignment:
            raise cur.fail(where, f"offset {offset:,} is not a multiple of the alignment {alignment}")
        if data_start + offset + nbytes > cur.size:
            raise cur.fail(
                where,
                f"{nbytes:,} bytes at offset {offset:,} run past the end of the file "
                f"({cur.size - data_start:,} bytes of tensor data)",
            )
        tensors[name] = TensorInfo(name, shape, type_id, data_start + offset, nbytes)
    ordered = sorted(tensors.values(), key=lambda t: t.start)
    for before, after in itertools.pairwise(ordered):
        if after.start < before.start + before.nbytes:
            raise cur.fail(
                f"tensor {after.name!r}",
                f"its bytes overlap tensor {before.name!r}'s (a file whose tensors share data)",
            )
    return tensors

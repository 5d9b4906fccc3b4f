"""Reading a GGUF file (llama.cpp's format) through the ``gguf`` library: metadata and tensors.

The file is memory-mapped by ``gguf.GGUFReader``; nothing in it is executed. Each tensor is
dequantized on request (``gguf.quants.dequantize``) into a torch tensor in PyTorch's
(row-major, outermost first) shape, one tensor at a time, so peak memory is about one
dequantized model plus one float32 tensor. Quantization types outside ``READABLE`` are a
``CheckpointError`` naming the tensor and its type, never a silently wrong weight.

``gguf`` is an optional dependency (``pip install zoo[gguf]``): it is imported here only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from zoo.errors import CheckpointError

# every type gguf-py's ``gguf.quants.dequantize`` reads (MXFP4: how llama.cpp stores gpt-oss
# experts); Q8_1, Q8_K (llama.cpp's activation-only types), integers and F64 are refused by name
READABLE = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
            "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0",
            "MXFP4", "NVFP4")
INSTALL_HINT = "reading GGUF files needs the gguf library: pip install zoo[gguf]"


def import_gguf() -> Any:
    """The ``gguf`` module, or a CheckpointError saying how to install it."""
    try:
        import gguf
    except ImportError:
        raise CheckpointError(INSTALL_HINT) from None
    return gguf


class GGUFCheckpoint:
    """One GGUF file: ``metadata`` (key -> Python value), ``tensors`` (name -> reader tensor)."""

    def __init__(self, path: str | Path) -> None:
        gguf = import_gguf()
        self.path = Path(path)
        try:
            self._reader = gguf.GGUFReader(str(self.path), "r")
        except FileNotFoundError:
            raise CheckpointError(f"{self.path}: no such file") from None
        except (ValueError, OSError, IndexError, KeyError) as exc:  # bad magic, truncated, corrupt header
            raise CheckpointError(f"{self.path}: not a readable GGUF file ({exc})") from None
        self.metadata: dict[str, Any] = {}
        for name, field in self._reader.fields.items():
            if name.startswith("GGUF."):  # the reader's own header fields (version, counts)
                continue
            self.metadata[name] = field.contents()
        self.tensors = {t.name: t for t in self._reader.tensors}
        parts = self.metadata.get("split.count")
        if parts is not None and int(parts) > 1:
            raise CheckpointError(f"{self.path}: split.count: a GGUF split in {parts} parts is not supported; "
                                  "merge it first (llama.cpp's gguf-split --merge)")

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise CheckpointError(f"{self.path}: general.architecture: required but missing")
        return arch

    def arch_key(self, key: str, default: Any = None) -> Any:
        """``{arch}.key`` from the metadata (e.g. ``block_count``), or ``default``."""
        value = self.metadata.get(f"{self.architecture}.{key}")
        return default if value is None else value

    def need(self, key: str) -> Any:
        value = self.arch_key(key)
        if value is None:
            raise CheckpointError(f"{self.path}: {self.architecture}.{key}: required but missing")
        return value

    def shape(self, name: str) -> tuple[int, ...]:
        """A tensor's PyTorch shape (GGUF lists dimensions innermost first)."""
        return tuple(int(s) for s in reversed(self.tensors[name].shape.tolist()))

    def type_name(self, name: str) -> str:
        return self.tensors[name].tensor_type.name

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

    def tensor(self, name: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The tensor dequantized to ``dtype``, in PyTorch's shape (a fresh copy)."""
        gguf = import_gguf()
        self._check_type(name)
        info = self.tensors[name]
        values = gguf.quants.dequantize(info.data, info.tensor_type)  # numpy float32
        if info.tensor_type.name == "F32":  # a view of the read-only map: copy it out
            values = values.copy()
        out = torch.from_numpy(values).reshape(self.shape(name))
        return out.to(dtype)

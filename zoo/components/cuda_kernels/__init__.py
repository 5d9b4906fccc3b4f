"""Adapters to optional CUDA kernel libraries (``pip install 'zoo[kernels]'``), one file per
library: each maps zoo's tensors to the library's layout, calls it, and maps the result
back, so the mixers keep one maths (their PyTorch reference) and one dispatch line. Each
module holds a ``Library``: it imports its library once and says why where it cannot (the
mixer then runs the reference); tests substitute a library's ``ops`` with the library's own
reference functions to check the plumbing without a GPU."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

OpsT = TypeVar("OpsT")


class Library(Generic[OpsT]):
    """One optional library's functions, imported at the first ``load`` and kept; where the
    import fails (not installed, or built for another torch or CUDA and raising on import),
    the reason is logged once with what to install, and every later ``load`` says None."""

    def __init__(self, name: str, importer: Callable[[], OpsT]) -> None:
        self.name = name
        self.importer = importer  # what load() calls, once
        self.ops: OpsT | None = None
        self.failed: str | None = None  # why the import failed, once it has

    def load(self) -> OpsT | None:
        """The library's functions, or None where it cannot be imported."""
        if self.ops is None and self.failed is None:
            try:
                self.ops = self.importer()
            except Exception as exc:  # ImportError, or a build for another torch/CUDA raising on load
                self.failed = f"{type(exc).__name__}: {exc}"
                log.warning("zoo: %s is not usable (%s); pip install 'zoo[kernels]'", self.name, self.failed)
        return self.ops

    def loaded(self) -> OpsT:
        """The functions of a library that ``load`` found (a kernel runs only after it did)."""
        assert self.ops is not None, f"{self.name} kernels called before load()"
        return self.ops

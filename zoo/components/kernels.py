"""Which implementation each token mixer runs: the reference PyTorch maths or a faster kernel.

A mixer with more than one implementation (``KernelChoice``) declares its ``kernel_family``
and the kernels it can run, each with the device kind it runs on. Kernels of one device may
cover different calls (a multi-token prefill scan, a one-token decode step); the mixer asks
for them in its own order, so where two cover the same call the one it asks first wins. The
choice is taken from the process's preference when the model is built (``preferring``; the
harness sets it from ``--impl``) and kept on the module:

- ``auto``: every kernel of the mixer's list that runs on the device and could be loaded
  (the reference for the calls none covers);
- ``reference``: the pure-PyTorch maths (what the fast paths are tested equal to);
- a kernel's name: that kernel where it applies (the reference elsewhere, and for mixers
  that do not have it).

A kernel is resolved at the first forward that may use it (the device is known then, and a
model built on ``meta`` for analysis never loads one); ``impl`` then names what ran (several
kernels joined by ``+``), and a row gathers them (``implementations``: ``"mamba: cpu-scan"``).
A kernel a mixer cannot use in a call is not resolved there and those calls run the
reference: under autograd unless the kernel declares ``autograd`` (its library defines the
backward, as mamba-ssm's and fla's prefill kernels do) and the call carries no cached state
(the one-token state updates have no backward), and inside a ``torch.compile`` graph unless
the kernel declares ``compiles`` (every call it makes is a custom op, ``cpu_ops``: zoo's C++
CPU kernels are; the CUDA libraries' Python entry points are not wrapped, so they stay out)
and the module resolved it before the graph was traced (``ChoosesKernel``: an extension
cannot be built while dynamo traces, so a graph reads what eager code resolved;
``zoo.model.generation``'s compiled prefill and decode step resolve first).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from zoo.errors import BenchError, allowed
from zoo.specs.interfaces import ChoosesKernel
from zoo.specs.registry import get_registry

REFERENCE, AUTO = "reference", "auto"


@dataclass(frozen=True)
class Kernel:
    """One fast implementation: its name, the device kind it runs on, a loader that
    returns False where it cannot run (not installed, not buildable), whether its
    stateless (training) path has a backward, so it may run under autograd, and whether
    its calls are custom ops a ``torch.compile`` graph can hold (``compiles``)."""

    name: str
    device_type: str
    loads: Callable[[], bool]
    autograd: bool = False
    compiles: bool = False


_preference: str = AUTO
_known: set[str] = {REFERENCE, AUTO}


class KernelChoice(ChoosesKernel):
    """A mixer with kernels besides its reference maths (mixin: subclasses list ``kernels``)."""

    kernel_family: ClassVar[str]
    kernels: ClassVar[tuple[Kernel, ...]] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        _known.update(k.name for k in cls.kernels)

    def choose_kernel(self) -> None:
        """Called once in ``__init__``: remember the preference in force at build."""
        self.impl_preference = _preference
        self.impl: str | None = None  # resolved at the first forward

    def resolve_kernel(self, device: torch.device) -> str:
        """The implementation this module runs on ``device`` (decided once): the reference, or
        its kernels' names joined by ``+``."""
        if self.impl is None:
            names = [
                kernel.name
                for kernel in self.kernels
                if self.impl_preference in (AUTO, kernel.name) and kernel.device_type == device.type and kernel.loads()
            ]
            self.impl = "+".join(names) or REFERENCE
        return self.impl

    def uses(self, kernel: Kernel, device: torch.device, stateful: bool) -> bool:
        """Whether this call runs ``kernel`` (the one question a mixer asks, see the module doc):
        inside a compiled graph only a kernel that ``compiles``, once resolved eagerly; under
        autograd only a kernel of the device that declares ``autograd``, on a call without a
        cached state (``stateful``: the call reads and writes one); otherwise whether the module
        resolved it for ``device`` (only the device's kernels are). A call that cannot use it
        resolves nothing, so training never loads an inference kernel."""
        if torch.compiler.is_compiling() and not (kernel.compiles and self.impl is not None):
            return False
        if torch.is_grad_enabled() and (stateful or not kernel.autograd or kernel.device_type != device.type):
            return False
        return kernel.name in self.resolve_kernel(device).split("+")


def check_preference(choice: str) -> str:
    """``choice`` if it is ``auto``, ``reference`` or a registered kernel's name, else a BenchError."""
    get_registry()  # every mixer module imported, so every kernel named
    if choice not in _known:
        raise BenchError(f"impl: {choice!r} is not an implementation; allowed: {allowed(sorted(_known))}")
    return choice


@contextlib.contextmanager
def preferring(choice: str) -> Iterator[None]:
    """Build models under ``choice`` (see the module docstring)."""
    global _preference
    previous, _preference = _preference, check_preference(choice)
    try:
        yield
    finally:
        _preference = previous


def implementations(model: nn.Module) -> str | None:
    """What the model's mixers ran, one entry per family: ``"mamba: cpu-scan"`` (None without
    choices). A family whose layers differ lists each implementation."""
    used: dict[str, set[str]] = {}
    for module in model.modules():
        if isinstance(module, KernelChoice) and module.impl is not None:
            used.setdefault(module.kernel_family, set()).add(module.impl)
    return ", ".join(f"{family}: {'/'.join(sorted(impls))}" for family, impls in sorted(used.items())) or None

"""zoo's C++ CPU kernels as torch custom ops: a compiled graph calls the kernel eager code calls.

A kernel's C++ is built lazily (``cpu_extension``: at the first call that may run it) and its
functions are pybind functions that dynamo cannot trace, so a ``torch.compile`` graph can hold
such a call only as an operator whose output shape is known without running it. A
``CppExtension`` declares each C++ function once (``CppFunction``): its operator schema in
torch's syntax, where ``Tensor(a!) state`` marks a tensor the function writes in place (what
functionalisation must know: inductor then writes the state where it lives, no copy), and a
shape function that gives the output as an empty tensor from the arguments (run on fake
tensors while a graph is traced). Each becomes ``torch.ops.zoo.<extension>_<function>``: the
schema and shape function defined here when the module imports, the CPU kernel the C++ function
itself, registered with torch's dispatcher by the extension as it loads (a ``TORCH_LIBRARY_IMPL``
block appended to its source), so a compiled graph's call reaches the C++ without passing
through Python. A mixer traces the op only where it resolved the kernel beforehand
(``KernelChoice.uses``), so by then the extension is loaded and its kernels registered.

``extension.op(name)`` is what a mixer calls: the op inside a graph, and outside one the pybind
function itself (the same C++ without the dispatcher: 2.4 against 3.9 µs a small product, hot). A
``Kernel`` whose calls all go through these ops declares ``compiles=True``. Plugins reach
``CppExtension`` and ``CppFunction`` through ``zoo.parts``; their ops share the ``zoo`` namespace
under their extension's name.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from zoo.components.cpu_extension import cpu_extension

NAMESPACE = "zoo"

_extensions: dict[str, CppExtension] = {}  # by name: an op's implementation finds its extension here
_ops: dict[str, Callable[..., torch.Tensor]] = {}  # qualified name -> op, registered once per process
_functions: dict[tuple[str, str], Callable[..., torch.Tensor]] = {}  # (extension, function) -> pybind function
_LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")  # kept alive: dropping it would unregister the ops


@dataclass(frozen=True)
class CppFunction:
    """One function of a C++ source: ``name``, its ``schema`` without the name (``"(Tensor x,
    Tensor(a!) h, int n) -> Tensor"``, the mutated tensors marked) and ``shape``, called with
    the arguments by name (fake tensors), returning the output as an empty tensor."""

    name: str
    schema: str
    shape: Callable[..., torch.Tensor]


class CppExtension:
    """A C++ source built on first use whose functions are custom ops (module doc)."""

    def __init__(self, name: str, source: str, functions: Sequence[CppFunction]) -> None:
        self.name, self.source = name, source
        self.functions = [function.name for function in functions]
        self._registration = _registration(name, self.functions)
        _extensions[name] = self  # a re-imported module's extension replaces the old one
        self._calls = {function.name: _call(name, function) for function in functions}
        self._available: bool | None = None  # the answer of ``available``, once asked

    def load(self) -> types.ModuleType | None:
        """The built extension, or None where it cannot be built (``cpu_extension``)."""
        return cpu_extension(self.name, self.source + self._registration, self.functions)

    def available(self) -> bool:
        """Whether the extension builds here: a ``Kernel``'s ``loads``. Asked while a graph is
        traced (a layer choosing its one-row path), it is built then, outside the trace.

        Kept once known: an eager decode step asks it before every norm, rotation, attention
        and int8 product (122 times a SmolLM2-135M step), and the five calls down to the
        build's memo cost 3.5% of that step at two threads. A trace reads the answer, not the
        memo: a graph traced while the memo was unset kept a guard on it, which the trace's
        own answer then broke, so a compiled prefill traced before any eager call compiled
        again at its second call."""
        if torch.compiler.is_compiling():
            return _built(self.name)
        if self._available is None:
            self._available = _built(self.name)
        return self._available

    def op(self, function: str) -> Callable[..., torch.Tensor]:
        """``function``, called as the module doc says (eager: the pybind function; traced: the op)."""
        return self._calls[function]

    def op_name(self, function: str) -> str:
        """The qualified name of ``function``'s op, ``zoo::<extension>_<function>``."""
        return _qualified(self.name, function)


def _built(extension: str) -> bool:
    """Whether ``extension`` builds here. dynamo calls it when tracing and keeps the answer as a
    constant of the graph: traced into, the build's hashing and file checks are calls it cannot
    trace, which broke ``zoo bench --compile`` on the CPU wherever no eager call had built the
    extension before the first trace."""
    return _extensions[extension].load() is not None


# What ``torch.compiler.assume_constant_result`` does to a function, done without the decorator,
# which imports the compiler stack (torch._dynamo) to do it: about 1.5 s of every ``zoo`` command and
# ``import zoo`` use that never compiles (``zoo show gpt2``: 3.8-4.0 -> 2.3-2.6 s on an AVX2 EPYC).
# tests/components/test_cpu_ops.py checks that the mark is the one the decorator sets.
CONSTANT_MARK = "_dynamo_marked_constant"
setattr(_built, CONSTANT_MARK, True)


def registered_ops() -> list[str]:
    """The qualified names of every op registered in this process (imported extensions only)."""
    return sorted(_ops)


def _op_name(extension: str, function: str) -> str:
    """The op's name inside the ``zoo`` namespace: ``<extension>_<function>``."""
    return f"{extension.removeprefix(NAMESPACE + '_')}_{function}"


def _qualified(extension: str, function: str) -> str:
    return f"{NAMESPACE}::{_op_name(extension, function)}"


def _function(extension: str, name: str) -> Callable[..., torch.Tensor]:
    """The pybind function ``name`` of the built ``extension`` (looked up once)."""
    key = (extension, name)
    if key not in _functions:
        module = _extensions[extension].load()
        assert module is not None, f"{extension} used without a built kernel (the mixer resolves it first)"
        _functions[key] = getattr(module, name)
    return _functions[key]


def _registration(extension: str, functions: Sequence[str]) -> str:
    """The C++ that registers each function as its op's CPU kernel when the extension loads."""
    impls = "".join(f'  m.impl("{_op_name(extension, name)}", TORCH_FN({name}));\n' for name in functions)
    return f"\n#include <torch/library.h>\nTORCH_LIBRARY_IMPL({NAMESPACE}, CPU, m) {{\n{impls}}}\n"


def _register(extension: str, function: CppFunction) -> Callable[..., torch.Tensor]:
    """The op of ``function`` (defined once per process; a re-imported module reuses it).

    Defined with ``torch.library.Library``, its CPU kernel registered by the extension's C++
    (``_registration``) rather than as a Python function (``torch.library.custom_op``, or
    ``Library.impl`` of one): inside a compiled graph each call then stays in C++, where a
    Python kernel converted the arguments to Python objects and back through pybind (a small
    product through the op: 5.9 µs a call against 2.6 through its pybind function, hot), and
    custom_op's autograd and version-counter layers cost 80-120 µs more. The kernels have no
    backward and run without autograd; ``opcheck`` finds the registration sound."""
    qualified = _qualified(extension, function.name)
    if qualified in _ops:
        return _ops[qualified]
    op_name = _op_name(extension, function.name)
    parsed = torch._C.parse_schema(f"{op_name}{function.schema}")
    names = [argument.name for argument in parsed.arguments]

    def fake(*args: object) -> torch.Tensor:
        return function.shape(**dict(zip(names, args, strict=True)))

    def load_then_call(*args: object) -> torch.Tensor:
        """The op called before its extension loaded (a graph exported or cached, run in a fresh
        process): loaded now, the C++ kernel it registers for the CPU takes this call and every
        later one. A tensor elsewhere would find this again: an error instead."""
        devices = {arg.device.type for arg in args if isinstance(arg, torch.Tensor)}
        if devices - {"cpu"}:
            raise NotImplementedError(f"{qualified} is a CPU kernel; got tensors on {sorted(devices)}")
        if _extensions[extension].load() is None:
            raise RuntimeError(f"{qualified}: its C++ extension {extension} could not be built here (logged)")
        return _ops[qualified](*args)

    _LIBRARY.define(f"{op_name}{function.schema}")
    _LIBRARY.impl(op_name, load_then_call, "CompositeExplicitAutograd")  # the CPU kernel, once loaded, comes first
    torch.library.register_fake(qualified, fake, lib=_LIBRARY)
    _ops[qualified] = getattr(getattr(torch.ops, NAMESPACE), op_name).default
    return _ops[qualified]


def _call(extension: str, function: CppFunction) -> Callable[..., torch.Tensor]:
    op = _register(extension, function)
    pybind: list[Callable[..., torch.Tensor]] = []  # the function once looked up: a decode step calls hundreds

    def call(*args: object) -> torch.Tensor:
        if torch.compiler.is_compiling():
            return op(*args)  # opaque in the graph: the same C++ through the dispatcher
        if not pybind:
            pybind.append(_function(extension, function.name))
        return pybind[0](*args)

    return call


def rows_of(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` in ``dtype`` with its last dimension contiguous, as an op reads rows (a split's view as it is)."""
    t = t.to(dtype)
    return t if t.stride(-1) == 1 else t.contiguous()


def on_float32_state(
    state: torch.Tensor | None, shape: tuple[int, ...], call: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """``call``'s output, given the float32 contiguous state a prompt op updates in place:
    ``state`` itself where it is one, else its float32 copy, written back after the call; zeros
    of ``shape``, thrown away, where there is no state."""
    if state is None:
        return call(torch.zeros(shape))
    h = state if state.dtype == torch.float32 and state.is_contiguous() else state.float().contiguous()
    out = call(h)
    if h is not state:
        state.copy_(h)
    return out

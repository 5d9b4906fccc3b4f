"""Build and load a C++ CPU extension from source, once per machine and process.

zoo's fused CPU kernels (``cpu_steps``; plugins through ``zoo.parts``) are small C++ sources
compiled with ``torch.utils.cpp_extension.load_inline`` (a C++ compiler and ninja) with the
flags of ``cpu_scan``: -O3, the host's instruction set, fast maths and OpenMP, so
``at::parallel_for`` runs on torch's threads. A source includes the headers it uses (ATen's,
``<ATen/ATen.h>`` for tensors, after any ``CPU_CAPABILITY`` macro its vector types need), and
only the generated bindings' headers follow it (``BINDING_HEADERS``), not load_inline's
implicit ``<torch/extension.h>``: that header is the whole C++ frontend, 29 s of a build's
parsing on an AVX2 EPYC, where ATen and pybind's tensor casters are 11 (the one-row products'
extension built in 28.8 s against 41.2; zoo's and zoo-rwkv's eight together in 179 s against
287, a fresh machine's first builds). The build is cached in torch's extensions folder, so
later processes load it in a second. The folder is per user, not per checkout, so the
module's name carries a hash of its source and flags: two checkouts (or versions) of zoo
building different sources under one name would otherwise overwrite each other's build and
load the other's functions. Where it cannot be built, ``cpu_extension`` logs why once and
returns None, and the caller runs its PyTorch reference.
"""

from __future__ import annotations

import hashlib
import logging
import types

log = logging.getLogger(__name__)

FLAGS = ["-O3", "-march=native", "-ffast-math", "-fopenmp"]
# what load_inline's generated bindings use: pybind11 with its at::Tensor casters, and
# torch::wrap_pybind_function, which turns a C++ error into a Python one
BINDING_HEADERS = "#include <torch/csrc/utils/pybind.h>\n#include <torch/csrc/Exceptions.h>\n"

_loaded: dict[str, types.ModuleType | None] = {}


def cpu_extension(name: str, source: str, functions: list[str]) -> types.ModuleType | None:
    """The extension ``name`` built from C++ ``source`` exporting ``functions``, or None where
    it cannot be built (the reason logged once per process)."""
    if name in _loaded:
        return _loaded[name]
    sources = [source, BINDING_HEADERS]
    digest = hashlib.sha256("\n".join([*sources, *FLAGS, *functions]).encode()).hexdigest()[:12]
    try:
        from torch.utils import cpp_extension

        _loaded[name] = cpp_extension.load_inline(
            name=f"{name}_{digest}",
            cpp_sources=sources,
            no_implicit_headers=True,  # the source's own headers (module doc)
            functions=functions,
            extra_cflags=FLAGS,
            extra_ldflags=["-fopenmp"],
            verbose=False,
        )
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
        log.warning("zoo: the C++ extension %s could not be built (%s); using the PyTorch reference", name, reason)
        _loaded[name] = None
    return _loaded[name]

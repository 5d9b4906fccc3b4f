"""zoo: assemble transformer language models from swappable parts, and measure them.

Public API only; see docs/architecture.md for how the pieces fit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zoo.specs.hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = [
    "CacheBytes",
    "ModelSpec",
    "ParamCount",
    "Row",
    "bench",
    "build",
    "cache_bytes",
    "chat",
    "compare",
    "count_params",
    "cross_kv_bytes",
    "embed",
    "flops_per_token",
    "errors",
    "from_pretrained",
    "fuse_projections",
    "generate",
    "hookimpl",
    "kv_bytes_per_token",
    "kv_cache_bytes",
    "list_architectures",
    "quant",
    "register_plugin",
    "save_pretrained",
    "spec",
    "state_bytes",
    "sweep",
    "weight_bytes",
]

# Heavy modules (torch) load on first use, so `import zoo` and `zoo --help` stay quick.
_LAZY = {
    "Row": ("zoo.harness.row", "Row"),
    "ModelSpec": ("zoo.specs.model", "ModelSpec"),
    "bench": ("zoo.harness.run", "bench"),
    "chat": ("zoo.hub.text", "chat"),
    "flops_per_token": ("zoo.analysis.counts", "flops_per_token"),
    "ParamCount": ("zoo.analysis.counts", "ParamCount"),
    "build": ("zoo.model.build", "build"),
    "compare": ("zoo.harness.sweep.run", "compare"),
    "sweep": ("zoo.harness.sweep.run", "sweep"),
    "count_params": ("zoo.analysis.counts", "count_params"),
    "kv_cache_bytes": ("zoo.analysis.counts", "kv_cache_bytes"),
    "cache_bytes": ("zoo.analysis.counts", "cache_bytes"),
    "CacheBytes": ("zoo.analysis.counts", "CacheBytes"),
    "state_bytes": ("zoo.analysis.counts", "state_bytes"),
    "cross_kv_bytes": ("zoo.analysis.counts", "cross_kv_bytes"),
    "kv_bytes_per_token": ("zoo.analysis.counts", "kv_bytes_per_token"),
    "weight_bytes": ("zoo.analysis.counts", "weight_bytes"),
    "register_plugin": ("zoo.specs.registry", "register_plugin"),
    "errors": ("zoo.errors", None),
    "quant": ("zoo.quant", None),
    "from_pretrained": ("zoo.hub.loading", "from_pretrained"),
    "save_pretrained": ("zoo.hub.save", "save_pretrained"),
    "generate": ("zoo.model.generation", "generate"),
    "fuse_projections": ("zoo.components.fused", "fuse_projections"),
    "embed": ("zoo.model.sentence", "embed"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module_name, attr = _LAZY[name]
        module = importlib.import_module(module_name)
        value = module if attr is None else getattr(module, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")


def spec(name: str) -> ModelSpec:
    """The named architecture's ModelSpec (a preset, or one a plugin registered)."""
    from zoo.specs.presets import preset

    return preset(name)


def list_architectures() -> list[str]:
    from zoo.specs.registry import get_registry

    return sorted(get_registry().architectures)


if TYPE_CHECKING:
    from zoo.analysis.counts import (
        CacheBytes,
        ParamCount,
        cache_bytes,
        count_params,
        cross_kv_bytes,
        flops_per_token,
        kv_bytes_per_token,
        kv_cache_bytes,
        state_bytes,
        weight_bytes,
    )
    from zoo.components.fused import fuse_projections
    from zoo.harness.row import Row
    from zoo.harness.run import bench
    from zoo.harness.sweep.run import compare, sweep
    from zoo.hub.loading import from_pretrained
    from zoo.hub.save import save_pretrained
    from zoo.hub.text import chat
    from zoo.model.build import build
    from zoo.model.generation import generate
    from zoo.model.sentence import embed
    from zoo.specs.model import ModelSpec
    from zoo.specs.registry import register_plugin

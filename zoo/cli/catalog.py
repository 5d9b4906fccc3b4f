"""What `zoo list` shows, cached so that listing does not wait for torch.

Building the rows needs the registry (which imports every component module, hence torch)
and the analysis of each preset: seconds. The rows only change when zoo's source, the
installed plugins or ``ZOO_PLUGINS`` change, so they are kept in a JSON file keyed by a
fingerprint of exactly those: the size and modification time of every ``.py`` file of zoo
and of each ``zoo`` entry point's package, the entry points themselves and their versions.
A run whose plugins failed to load is not cached (its warning must show every time).

The cache lives in ``$ZOO_CACHE_DIR``, else ``$XDG_CACHE_HOME/zoo``, else ``~/.cache/zoo``;
a cache that cannot be read or written is ignored.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

from zoo.files.cache import cache_dir

CACHE_FORMAT = 1


def _tree_stamp(root: Path) -> list[tuple[str, int, int]]:
    stamp = []
    for path in sorted(root.rglob("*.py")):
        try:
            st = path.stat()
        except OSError:
            continue
        stamp.append((str(path), st.st_mtime_ns, st.st_size))
    return stamp


def _package_root(module: str) -> Path | None:
    try:
        found = importlib.util.find_spec(module.split(".")[0])
    except (ImportError, ValueError):
        return None
    if found is None or not found.origin:
        return None
    origin = Path(found.origin)
    return origin.parent if origin.name == "__init__.py" else origin


def fingerprint() -> str:
    """A hash of what the rows depend on; computed without importing torch or any plugin."""
    import zoo

    parts: list[Any] = [
        CACHE_FORMAT,
        zoo.__version__,
        os.environ.get("ZOO_PLUGINS"),
        _tree_stamp(Path(zoo.__file__).parent),
    ]
    for ep in sorted(metadata.entry_points(group="zoo"), key=lambda e: (e.name, e.value)):
        dist = ep.dist
        parts.append([ep.name, ep.value, dist.name if dist else None, dist.version if dist else None])
        root = _package_root(ep.value.split(":")[0])
        if root is not None:
            parts.append(_tree_stamp(root) if root.is_dir() else [(str(root), root.stat().st_mtime_ns)])
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:24]


def build_catalog() -> dict[str, Any]:
    """Every architecture with its parameters and KV bytes per token, and the kinds per family."""
    import sys

    import zoo
    from zoo.analysis.counts import topology
    from zoo.errors import PluginError
    from zoo.specs.registry import get_registry
    from zoo.specs.registry_entries import SLOTS

    registry = get_registry()
    rows = []
    broken = False
    for name in sorted(registry.architectures):
        try:
            spec = zoo.spec(name)
        except PluginError as exc:  # a plugin's broken preset: reported, the others still listed
            sys.stderr.write(f"zoo: warning: skipped {exc}\n")
            broken = True
            continue
        count = zoo.count_params(spec)
        kind = topology(spec)
        rows.append(
            {
                "name": name,
                "topology": kind,
                "params": count.total,
                "active": count.active,  # an encoder-only model keeps no cache: no KV bytes (None)
                "kv_bytes_per_token_bf16": None if kind == "encoder" else zoo.kv_bytes_per_token(spec),
                "plugin": registry.architectures[name].plugin,
            }
        )
    catalog = {"architectures": rows, "components": {slot: registry.kinds(slot) for slot in SLOTS}}
    return {**catalog, "_cacheable": not registry.failures and not broken}


def catalog(use_cache: bool = True) -> dict[str, Any]:
    """The `zoo list` document: from the cache when it matches, else built (and cached)."""
    import sys

    registry_module = sys.modules.get("zoo.specs.registry")
    if registry_module is not None and getattr(registry_module, "_runtime_plugins", None):
        use_cache = False  # plugins added at run time (zoo.register_plugin) are not in the fingerprint
    path = cache_dir() / "list.json"
    key = fingerprint() if use_cache else ""
    if use_cache:
        try:
            cached = json.loads(path.read_text(encoding="utf-8"))
            if cached.get("fingerprint") == key:
                return cached["catalog"]
        except (OSError, ValueError, AttributeError, KeyError):
            pass
    built = build_catalog()
    cacheable = built.pop("_cacheable")
    if use_cache and cacheable:
        from zoo.files.atomic import write_text_atomic

        try:
            write_text_atomic(path, json.dumps({"fingerprint": key, "catalog": built}))
        except OSError:
            pass
    return built

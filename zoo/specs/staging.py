"""Make an uninstalled plugin folder loadable through its entry points, for tests.

zoo finds plugins through installed entry points (group ``zoo``). Instead of
``pip install -e`` (which would change the environment the tests run in), ``stage_plugin``
gives a temporary folder a ``<dist>-<version>.dist-info`` declaring the entry points of the
plugin's ``pyproject.toml``, and puts it and the plugin's source folder on ``sys.path`` and
``PYTHONPATH`` (for commands the tests start); the folder is removed at exit. The plugins in
``plugins/`` stage themselves with it in their own tests and in zoo's ``tests/plugins/``.

Nothing is done when every entry point is already installed (by the user). A plugin module
that is importable without its entry point (``python -m pytest`` run inside the plugin's
folder puts it on ``sys.path``) still gets the entry point, or zoo would never load it.
"""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from zoo.specs.plugins import ENTRY_POINT_GROUP


def stage_plugin(root: str | Path) -> None:
    """Stage the plugin distribution whose ``pyproject.toml`` is in ``root`` (a path or a str)."""
    root = Path(root)
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    name, version = project["name"], project["version"]
    entry_points: dict[str, str] = project["entry-points"][ENTRY_POINT_GROUP]
    installed = {ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    if set(entry_points) <= installed:
        return
    site = Path(tempfile.mkdtemp(prefix=f"{name}-site-"))
    atexit.register(shutil.rmtree, site, ignore_errors=True)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}")
    for path in (str(root), str(site)):
        sys.path.append(path)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), path) if p)
    importlib.invalidate_caches()

"""Make zoo-rwkv importable with its entry point, without installing it into the environment.

As ``plugins/zoo-mla/tests/staging.py`` does for zoo-mla (the module has its own name, so
both plugins' tests run in one session): zoo finds plugins through installed entry points,
so a temporary folder gets a ``zoo_rwkv-<version>.dist-info`` declaring the entry point, and
it and the plugin's source folder go on ``sys.path`` and ``PYTHONPATH`` (for commands the
tests start). Nothing is done when the entry point is already installed (by the user); a
zoo_rwkv that is importable without one (``python -m pytest`` run inside plugins/zoo-rwkv
puts it on sys.path) still gets the entry point.
"""

from __future__ import annotations

import atexit
import importlib
import os
import re
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path

PLUGIN_ROOT = Path(__file__).resolve().parents[1]


def stage_zoo_rwkv() -> None:
    if any(ep.name == "rwkv" for ep in metadata.entry_points(group="zoo")):
        return
    text = (PLUGIN_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    version = re.search(r'^version = "([^"]+)"', text, re.M).group(1)  # type: ignore[union-attr]
    site = Path(tempfile.mkdtemp(prefix="zoo-rwkv-site-"))
    atexit.register(shutil.rmtree, site, ignore_errors=True)
    info = site / f"zoo_rwkv-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: zoo-rwkv\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("[zoo]\nrwkv = zoo_rwkv\n")
    for path in (str(PLUGIN_ROOT), str(site)):
        sys.path.append(path)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), path) if p)
    importlib.invalidate_caches()

"""Install plugins/zoo-mla into the test environment, as a user would (pip, editable)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import site
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest

from zoo.registry import reset_registry

ZOO_MLA = Path(__file__).resolve().parents[2] / "plugins" / "zoo-mla"


def _installed_from(path: Path) -> bool:
    try:
        direct_url = metadata.distribution("zoo-mla").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return False
    return bool(direct_url) and json.loads(direct_url).get("url") == path.as_uri()


def install_editable(path: Path) -> None:
    """``pip install --no-deps -e path`` (offline: no build isolation when setuptools is here)."""
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", str(path)]
    if importlib.util.find_spec("setuptools") is not None:
        command.insert(4, "--no-build-isolation")
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
    for directory in site.getsitepackages():  # run the new .pth file in this process too
        site.addsitedir(directory)
    importlib.invalidate_caches()


@pytest.fixture(scope="session")
def zoo_mla() -> ModuleType:
    if not _installed_from(ZOO_MLA) or importlib.util.find_spec("zoo_mla") is None:
        install_editable(ZOO_MLA)
    reset_registry()
    return importlib.import_module("zoo_mla")

"""zoo-mla, zoo-rwkv and zoo-titans (plugins/) through their entry points, staged in temporary folders:
the test environment is left as it was found (see zoo/specs/staging.py)."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

from zoo.specs.registry import reset_registry
from zoo.specs.staging import stage_plugin

ZOO_MLA = Path(__file__).resolve().parents[2] / "plugins" / "zoo-mla"
ZOO_RWKV = Path(__file__).resolve().parents[2] / "plugins" / "zoo-rwkv"
ZOO_TITANS = Path(__file__).resolve().parents[2] / "plugins" / "zoo-titans"


def _staged(root: Path, module: str) -> ModuleType:
    stage_plugin(root)
    reset_registry()
    return importlib.import_module(module)


@pytest.fixture(scope="session")
def zoo_mla() -> ModuleType:
    return _staged(ZOO_MLA, "zoo_mla")


@pytest.fixture(scope="session")
def zoo_rwkv() -> ModuleType:
    return _staged(ZOO_RWKV, "zoo_rwkv")


@pytest.fixture(scope="session")
def zoo_titans() -> ModuleType:
    return _staged(ZOO_TITANS, "zoo_titans")

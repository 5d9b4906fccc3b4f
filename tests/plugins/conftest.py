"""zoo-mla and zoo-rwkv (plugins/) through their entry points, staged in temporary folders:
the test environment is left as it was found (see plugins/zoo-mla/tests/staging.py)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

from zoo.registry import reset_registry

ZOO_MLA = Path(__file__).resolve().parents[2] / "plugins" / "zoo-mla"
ZOO_RWKV = Path(__file__).resolve().parents[2] / "plugins" / "zoo-rwkv"


@pytest.fixture(scope="session")
def zoo_mla() -> ModuleType:
    sys.path.insert(0, str(ZOO_MLA / "tests"))
    try:
        from staging import stage_zoo_mla
    finally:
        sys.path.remove(str(ZOO_MLA / "tests"))
    stage_zoo_mla()
    reset_registry()
    return importlib.import_module("zoo_mla")


@pytest.fixture(scope="session")
def zoo_rwkv() -> ModuleType:
    sys.path.insert(0, str(ZOO_RWKV / "tests"))
    try:
        from rwkv_staging import stage_zoo_rwkv
    finally:
        sys.path.remove(str(ZOO_RWKV / "tests"))
    stage_zoo_rwkv()
    reset_registry()
    return importlib.import_module("zoo_rwkv")

"""zoo-mla (plugins/zoo-mla) through its entry point, staged in a temporary folder: the test
environment is left as it was found (see plugins/zoo-mla/tests/staging.py)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

from zoo.registry import reset_registry

ZOO_MLA = Path(__file__).resolve().parents[2] / "plugins" / "zoo-mla"


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

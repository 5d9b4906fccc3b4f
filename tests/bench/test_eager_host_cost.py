"""bench/eager_host_cost.py on the CPU: the counts it prints come from a real eager step."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_an_eager_step_is_timed_and_its_operators_counted():
    spec = importlib.util.spec_from_file_location("eager_host_cost", BENCH / "eager_host_cost.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["eager_host_cost"] = module
    spec.loader.exec_module(module)
    m = module.measure("gpt2", torch.device("cpu"), 1)
    assert m["ms_per_step"] > 0 and m["aten_ops_per_step"] > 0
    assert m["launches_per_step"] == 0 and m["device_ms_per_step"] == 0 and m["syncs_per_step"] == 0

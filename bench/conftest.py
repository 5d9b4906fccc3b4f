"""pytest-benchmark suites: `pytest bench/ --benchmark-only` (not part of the default `pytest`).

Unless --benchmark-json is given, results are saved to results/bench-components.json at the
repository root, so a run regenerates the committed file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

RESULTS = Path(__file__).resolve().parents[1] / "results"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "benchmark_json") and config.option.benchmark_json is None:
        RESULTS.mkdir(exist_ok=True)
        config.option.benchmark_json = RESULTS / "bench-components.json"


@pytest.fixture(autouse=True)
def _no_grad():
    with torch.inference_mode():
        torch.manual_seed(0)
        yield

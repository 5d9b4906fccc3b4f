"""pytest-benchmark suites: `pytest bench/ --benchmark-only` (not part of the default `pytest`).

They run in one process, whatever the default ``-n auto`` of the tests says: timings taken side by side
on the same cores measure each other, and pytest-benchmark turns its timers off under pytest-xdist.

Unless --benchmark-json is given, results are saved to a file in the temporary folder (named
at the end of the run); ``--write-results`` saves them to the tracked results/bench-components.json
instead, regenerating it. A plain run leaves the tree as it found it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

RESULTS = Path(__file__).resolve().parents[1] / "results"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--write-results",
        action="store_true",
        help="save benchmark results to the tracked results/bench-components.json",
    )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` on a benchmark run: no workers (module doc)."""
    return 0


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "benchmark_json") and config.option.benchmark_json is None:
        if config.getoption("--write-results"):
            RESULTS.mkdir(exist_ok=True)
            target = RESULTS / "bench-components.json"
        else:
            target = Path(tempfile.gettempdir()) / "zoo-bench-components.json"
        config.option.benchmark_json = target  # pytest-benchmark names it at the end: "Wrote benchmark data in"


@pytest.fixture(autouse=True)
def _no_grad():
    with torch.inference_mode():
        torch.manual_seed(0)
        yield

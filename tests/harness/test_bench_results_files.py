"""Benchmarks leave tracked results files alone unless asked: bench/vs_transformers.py and
`pytest bench/` write to the temporary folder by default, the tracked files with --write-results."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.path.insert(0, str(BENCH))
    sys.modules[module.__name__] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    finally:
        sys.path.remove(str(BENCH))
    return module


def test_vs_transformers_writes_the_tracked_table_only_when_asked():
    script = _load("vs_transformers")
    default = script.parse_args([])
    assert default.out.parent == Path(tempfile.gettempdir()) and default.out != script.RESULTS
    assert script.parse_args(["--write-results"]).out == script.RESULTS
    assert script.parse_args(["--out", "x.md"]).out == Path("x.md")


def test_pytest_bench_saves_to_the_temporary_folder_by_default():
    conftest = _load("conftest")

    class Option:
        benchmark_json = None

    class Config:
        option = Option()

        def __init__(self, write: bool) -> None:
            self.write = write

        def getoption(self, name: str) -> bool:
            return self.write

    for write, folder in ((False, Path(tempfile.gettempdir())), (True, conftest.RESULTS)):
        config = Config(write)
        config.option = Option()
        conftest.pytest_configure(config)
        assert Path(config.option.benchmark_json).parent == folder

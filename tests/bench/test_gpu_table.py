"""bench/gpu_table.py at tiny sizes on the CPU: every case of the GPU table runs through zoo
bench's own code (or is skipped with its reason), so the script cannot rot before a GPU
is at hand."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gpu_table", BENCH / "gpu_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_table"] = module
    spec.loader.exec_module(module)
    return module


def test_the_whole_table_runs_at_tiny_sizes_and_saves_every_line(tmp_path, capsys):  # type: ignore[no-untyped-def]
    table = _load()
    assert table.main(["--tiny", "--cpu", "--out", str(tmp_path)]) == 0
    lines = [json.loads(x) for x in (tmp_path / "gpu-cpu-tiny.jsonl").read_text().splitlines()]
    assert [(x["model"], x["mode"]) for x in lines] == [(c.model, c.mode) for c in table.cases()]
    for line in lines:
        assert line["status"] == "ok" or line["status"].startswith("skipped: plugin"), line
        if line["status"] == "ok":
            assert line["tokens_per_s"] > 0, line
    md = (tmp_path / "gpu-cpu-tiny.md").read_text()
    assert "| llama-3.2-1b | decode b1 compiled |" in md
    assert "| gpt-fast loop | decode b1 compiled (llama-3.2-1b) |" in md
    assert all(line["wall_s"] >= 0 for line in lines if not line["status"].startswith("skipped"))
    assert md in capsys.readouterr().out


def test_every_family_comes_before_any_compiled_row():  # type: ignore[no-untyped-def]
    """A lent GPU's short budget measures each family once before it spends minutes compiling."""
    rows = [(c.model, c.mode) for c in _load().cases()]
    first_compiled = next(i for i, (_, mode) in enumerate(rows) if "compiled" in mode)
    eager = {model for model, _ in rows[:first_compiled]}
    assert eager >= {"llama-3.2-1b", "qwen3-0.6b", "mamba-130m", "mamba2-130m", "qwen3-1.7b", "bert-base-uncased"}
    assert {"t5-base", "rwkv-4-169m-pile"} <= eager


def test_a_case_past_the_budget_is_skipped_with_its_reason(tmp_path):  # type: ignore[no-untyped-def]
    table = _load()
    table.main(["--cpu", "--out", str(tmp_path), "--budget-s", "0", "--only", "qwen3-0.6b"])
    lines = [json.loads(x) for x in (tmp_path / "gpu-cpu-tiny.jsonl").read_text().splitlines()]
    assert lines and all(x["status"].startswith("skipped: needs ~") for x in lines)


def test_help_does_not_run_the_table(capsys):  # type: ignore[no-untyped-def]
    table = _load()
    try:
        table.main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    assert "--budget-s" in capsys.readouterr().out


def test_resume_keeps_what_an_earlier_run_on_the_device_measured(tmp_path):  # type: ignore[no-untyped-def]
    """A lent GPU's sessions are short: the next one measures what the last did not."""
    table = _load()
    log = tmp_path / "gpu-cpu-tiny.jsonl"
    table.main(["--cpu", "--out", str(tmp_path), "--only", "qwen3-0.6b decode b1 eager"])
    first = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["status"] for x in first] == ["ok"]
    with log.open("a") as torn:  # a run cut off mid-line
        torn.write('{"model": "qwen3-0.6b", "mo')
    table.main(["--cpu", "--out", str(tmp_path), "--resume", "--budget-s", "0", "--only", "qwen3-0.6b"])
    after = [json.loads(x) for x in log.read_text().splitlines()]
    assert after[0] == first[0]  # kept, not measured again
    rest = after[1:]
    assert rest and all(x["status"].startswith("skipped: needs ~") for x in rest)
    assert ("qwen3-0.6b", "decode b1 eager") not in {(x["model"], x["mode"]) for x in rest}
    md = (tmp_path / "gpu-cpu-tiny.md").read_text()
    kept = next(row for row in md.splitlines() if row.startswith("| qwen3-0.6b | decode b1 eager |"))
    assert "| ok |" in kept and first[0]["timestamp"][:10] in kept


def test_a_case_that_needs_a_plugin_names_a_plugin_of_this_repository():  # type: ignore[no-untyped-def]
    """The registry knows a plugin by its entry point's name (``[project.entry-points.zoo]``)."""
    import tomllib

    declared = set()
    for project in (BENCH.parent / "plugins").glob("*/pyproject.toml"):
        declared |= set(tomllib.loads(project.read_text())["project"]["entry-points"]["zoo"])
    needed = {c.plugin for c in _load().cases() if c.plugin}
    assert needed and needed <= declared, needed - declared

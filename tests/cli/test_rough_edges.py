"""Rough edges of real use (issue 25): integer columns stay integers beside a failed row, the
bench table names what it measured and its CSV is raw numbers, one float notation in every
table, `--resume` with nothing left rewrites nothing, and `zoo bench` writes results only
where it says (results/ under the current folder, nothing with --no-save)."""

from __future__ import annotations

import csv
import io
import json
import textwrap
from pathlib import Path

import pytest

from tests.conftest import tiny_spec
from zoo.cli import main
from zoo.cli.output import cell_text
from zoo.harness.report.cells import format_cell

BENCH = ["--device", "cpu", "--prompt-len", "8", "--gen-len", "4", "--repeats", "1", "--threads", "1"]


@pytest.fixture
def tiny_file(tmp_path: Path) -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(tiny_spec("qwen3-0.6b").override({"name": "mine"}).to_yaml())
    return path


def test_a_failed_row_leaves_integer_columns_integers(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--arch", "qwen3-0.6b", "--vary", "attention.n_kv_heads=3,4", "--analysis-only"]
    assert main([*argv, "--json"]) == 0
    failed, ok = json.loads(capsys.readouterr().out)["rows"]
    assert failed["status"] == "failed" and failed["n_layers"] is None
    assert ok["n_layers"] == 28 and isinstance(ok["n_layers"], int) and isinstance(ok["params_total"], int)
    assert main([*argv, "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows[0]["n_layers"] == "" and rows[1]["n_layers"] == "28" and rows[1]["params_total"].isdigit()


def test_the_bench_table_names_the_model_and_its_csv_is_raw(
    tiny_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--spec", str(tiny_file), *BENCH, "--no-save"]) == 0
    first = capsys.readouterr().out.splitlines()[1]  # after the header line
    assert first.startswith("model") and first.rstrip().endswith("mine, random weights (float32)")
    assert main(["bench", "--spec", str(tiny_file), *BENCH, "--no-save", "--format", "csv"]) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert row["arch"] == "mine" and row["params_total"].isdigit() and "," not in row["weight_bytes"]
    assert float(row["decode_tokens_per_s"]) > 0


def test_floats_are_written_one_way() -> None:
    for render in (format_cell, cell_text):
        assert [render(v) for v in (123456.7, 1234.0, 12.3456, 0.001234, 0.0000123, 0.0)] == [
            "123,457",
            "1,234",
            "12.35",
            "0.001234",
            "1.230e-05",
            "0",
        ]


def test_resume_with_nothing_left_rewrites_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "kv.toml"
    sweep.write_text(
        textwrap.dedent("""\
        name = "kv"
        arch = "qwen3-0.6b"
        analysis_only = true
        [vary]
        "attention.n_kv_heads" = [4, 8]
        """)
    )
    out = tmp_path / "r"
    assert main(["sweep", str(sweep), "--results-dir", str(out)]) == 0
    files = sorted(p for p in out.iterdir() if p.is_file() and not p.name.startswith("."))
    assert {p.name for p in files} >= {"kv.jsonl", "kv.csv", "kv.md"}
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in files}
    assert main(["sweep", str(sweep), "--results-dir", str(out), "--resume"]) == 0
    assert "nothing measured" in capsys.readouterr().err
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in files} == before


def test_bench_writes_results_under_the_current_folder_only_unless_told(
    tiny_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--spec", str(tiny_file), *BENCH, "--no-save", "--json"]) == 0
    assert not (tmp_path / "results").exists()
    assert main(["bench", "--spec", str(tiny_file), *BENCH, "--json"]) == 0
    assert "appended to results/bench.jsonl" in capsys.readouterr().err
    assert len((tmp_path / "results" / "bench.jsonl").read_text().splitlines()) == 1

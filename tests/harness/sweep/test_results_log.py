"""Results logs under concurrency and damage: real parallel processes, through the command."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from tests.harness.sweep_helpers import write_tiny_spec
from zoo.errors import BenchError
from zoo.harness.sweep.grid import load_plan
from zoo.harness.sweep.results_log import append_row, cut_torn_tail, read_log

REPO = Path(__file__).resolve().parents[3]
ZOO = [sys.executable, "-m", "zoo"]


@pytest.fixture(scope="module")
def measurement():
    from tests.conftest import tiny_spec
    from zoo.harness.run import bench

    return bench(tiny_spec("gpt2"), device="cpu", prompt_len=4, gen_len=2, repeats=1)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """The promise for every bad input: exit 2, one line on stderr, no traceback."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


APPENDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from zoo.harness.report.tables import append_result
    from zoo.harness.row import Row
    row = Row.model_validate_json(Path(sys.argv[1]).read_text())
    start = Path(sys.argv[2])
    while not start.exists():
        time.sleep(0.01)
    for i in range(int(sys.argv[4])):
        append_result(row.model_copy(update={"arch": f"{sys.argv[3]}-{i}"}), sys.argv[5])
""")


def test_parallel_benches_keep_every_row(tmp_path, measurement):
    """Four processes append 4 rows each to a log of 100 rows at the same moment: 116 rows."""
    results = tmp_path / "results"
    results.mkdir()
    log = results / "bench.jsonl"
    log.write_text(
        "".join(measurement.model_copy(update={"arch": f"old-{i}"}).model_dump_json() + "\n" for i in range(100))
    )
    row_file = tmp_path / "row.json"
    row_file.write_text(measurement.model_dump_json())
    start = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, str(row_file), str(start), f"p{n}", "4", str(results)], cwd=REPO
        )
        for n in range(4)
    ]
    start.touch()
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    archs = [row["arch"] for row in read_log(log)]
    assert len(archs) == 116 and len(set(archs)) == 116
    csv_lines = (results / "bench.csv").read_text().strip().splitlines()
    assert len(csv_lines) == 117  # header + every row: the rendering is of the whole log


def test_zoo_bench_refuses_a_damaged_log_before_measuring_and_writes_nothing(tmp_path):
    damage = b'{"arch": "x"}\n\xff\xfe\n'
    log = tmp_path / "bench.jsonl"
    log.write_bytes(damage)
    result = subprocess.run(
        [*ZOO, "bench", "--arch", "gpt2", "--results-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = one_error_line(result)
    assert "bench.jsonl: line" in line and "damaged" in line
    assert log.read_bytes() == damage and not (tmp_path / "bench.csv").exists()
    assert result.stdout == ""  # nothing was measured


def test_zoo_bench_refuses_an_unwritable_results_dir_before_measuring(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where a folder should be")
    result = subprocess.run(
        [*ZOO, "bench", "--arch", "gpt2", "--results-dir", str(blocker / "results")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "cannot write results there" in one_error_line(result) and result.stdout == ""


def test_complete_last_row_without_newline_counts_and_is_kept(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"point_id": "a"}\n{"point_id": "b"}')
    assert [r["point_id"] for r in read_log(log)] == ["a", "b"]
    append_row(log, {"point_id": "c"})
    assert log.read_text() == '{"point_id": "a"}\n{"point_id": "b"}\n{"point_id": "c"}\n'
    log.write_text('{"point_id": "a"}\n{"point_id": "b", "x": [1,')  # torn: cut, ignored
    assert [r["point_id"] for r in read_log(log)] == ["a"]
    cut_torn_tail(log)
    assert log.read_text() == '{"point_id": "a"}\n'


@pytest.mark.parametrize("damage", [b"[]\n", b"not json\n", b'{"arch": "x"}\n'])
def test_a_damaged_bench_log_is_refused_before_writing(tmp_path, damage, measurement):
    from zoo.harness.report.tables import append_result, check_results

    (tmp_path / "bench.jsonl").write_bytes(damage)
    with pytest.raises(BenchError, match="damaged"):
        check_results(tmp_path)
    with pytest.raises(BenchError, match="damaged"):
        append_result(measurement, tmp_path)
    assert (tmp_path / "bench.jsonl").read_bytes() == damage and not (tmp_path / "bench.csv").exists()


def test_damaged_lines_are_one_error(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_bytes(b'{"point_id": "a"}\n[]\n')
    with pytest.raises(BenchError, match="line 2 is a JSON list, not a row object"):
        read_log(log)
    log.write_bytes(b'\xff\n{"point_id": "a"}\n')
    with pytest.raises(BenchError, match="line 1 is not UTF-8"):
        read_log(log)


def _analysis_sweep(directory: Path, name: str = "grid") -> Path:
    write_tiny_spec(directory)
    path = directory / f"{name}.toml"
    path.write_text(
        f'name = "{name}"\nspec_file = "tiny.yaml"\nanalysis_only = true\n'
        '[vary]\n"attention.kind" = ["mha", "gqa", "mqa"]\n"ffn.hidden" = [32, 48]\n'
    )
    return path


def test_resume_keeps_a_complete_unterminated_last_row(tmp_path):
    import zoo

    sweep_file = _analysis_sweep(tmp_path)
    zoo.sweep(sweep_file, results_dir=tmp_path)
    log = tmp_path / "grid.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:4]))  # 4 rows; the 4th complete but without its newline
    zoo.sweep(sweep_file, results_dir=tmp_path, resume=True)
    rows = read_log(log)
    assert len(rows) == 6 and set(Counter(r["point_id"] for r in rows).values()) == {1}
    assert log.read_text().splitlines()[:4] == lines[:4]


def test_resume_drops_duplicate_rows_from_the_table(tmp_path):
    import zoo

    sweep_file = _analysis_sweep(tmp_path)
    zoo.sweep(sweep_file, results_dir=tmp_path)
    log = tmp_path / "grid.jsonl"
    log.write_text(log.read_text() + log.read_text().splitlines(keepends=True)[0])  # an old duplicate
    frame = zoo.sweep(sweep_file, results_dir=tmp_path, resume=True)
    assert len(frame) == 6 and frame["point_id"].is_unique


def test_two_sweeps_on_one_log_never_duplicate_a_point(tmp_path):
    """Two measured sweeps start together on one results file: each point is logged once; the
    one that finds the log locked is refused in one line."""
    write_tiny_spec(tmp_path)
    sweep_file = tmp_path / "pair.toml"
    sweep_file.write_text(
        'name = "pair"\nspec_file = "tiny.yaml"\ndepth = 1\n'
        '[run]\ndevice = "cpu"\nprompt_len = 4\ngen_len = 2\nrepeats = 1\nthreads = 1\n'
        '[vary]\n"attention.kind" = ["mha", "gqa", "mqa"]\n'
    )
    command = [*ZOO, "sweep", str(sweep_file), "--results-dir", str(tmp_path / "results"), "--resume"]
    procs = [
        subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outcomes = [(p.wait(timeout=240), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    for proc in procs:
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    rows = read_log(tmp_path / "results" / "pair.jsonl")
    assert sorted(Counter(r["point_id"] for r in rows).values()) == [1, 1, 1]
    assert {p.id for p in load_plan(sweep_file).expand()} == {r["point_id"] for r in rows}
    for code, err in outcomes:
        assert code == 0 or (
            code == 2 and "another zoo process is writing" in err and len(err.strip().splitlines()) == 1
        ), err


@pytest.mark.parametrize("name", ["../../x", "/abs/x", ".hidden", "a/b", ""])
def test_sweep_names_stay_inside_the_results_dir(tmp_path, name):
    sweep_file = _analysis_sweep(tmp_path)
    sweep_file.write_text(sweep_file.read_text().replace('name = "grid"', f"name = {json.dumps(name)}"))
    with pytest.raises(BenchError, match="is not a file name"):
        load_plan(sweep_file)
    if name != "../../x":
        return
    result = subprocess.run(
        [*ZOO, "sweep", str(sweep_file), "--results-dir", str(tmp_path / "r")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "is not a file name" in one_error_line(result)
    assert not (tmp_path / "x.jsonl").exists() and not (tmp_path.parent / "x.jsonl").exists()

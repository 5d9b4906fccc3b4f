import csv
import json

from tests.conftest import tiny_spec
from zoo.harness.report.tables import append_result, write_atomic
from zoo.harness.run import bench


def test_rows_append_and_render_atomically(tmp_path):
    m = bench(tiny_spec("gpt2"), device="cpu", prompt_len=8, gen_len=3, repeats=1)
    paths = append_result(m, tmp_path)
    append_result(m.model_copy(update={"arch": "second"}), tmp_path)
    rows = [json.loads(line) for line in paths["jsonl"].read_text().splitlines()]
    assert [r["arch"] for r in rows] == [m.arch, "second"]
    table = list(csv.DictReader(paths["csv"].open()))
    assert [r["arch"] for r in table] == [m.arch, "second"] and "sdpa_backend" in table[0]
    markdown = paths["md"].read_text().splitlines()
    assert markdown[0].startswith("| timestamp | arch") and len(markdown) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.csv", "bench.jsonl", "bench.md"]  # no temp files left


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "x.txt"
    write_atomic(path, "old")

    try:
        write_atomic(path, object())  # type: ignore[arg-type]
    except (TypeError, AttributeError):
        pass
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["x.txt"]

"""Issue 18: commands that build, load and measure models, read through pipes: plain output,
no progress bar, one JSON document, honest exit statuses."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import textwrap

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

import zoo
from tests.cli.pipes import environment
from tests.cli.pipes import zoo as run_zoo
from tests.conftest import TINY_VOCAB, tiny_spec
from tests.harness.sweep_helpers import write_tiny_spec

TINY_BENCH = ["--device", "cpu", "--prompt-len", "8", "--gen-len", "4", "--repeats", "1", "--threads", "1"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    zoo.save_pretrained(zoo.build(tiny_spec("qwen3-0.6b"), seed=0), folder)
    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(TINY_VOCAB)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def test_generate_piped_starts_with_the_prompt(checkpoint):
    result = run_zoo(
        "generate", "--weights", str(checkpoint), "w5 w9", "--max-new-tokens", "3", "--threads", "1", "--device", "cpu"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("w5 w9") and result.stdout.endswith("\n") and result.stdout.count("\n") == 1
    assert result.stderr.count("\n") == 1 and "tokens/s" in result.stderr  # the rate, no bar


def test_bench_formats_on_a_pipe(tmp_path):
    spec = str(write_tiny_spec(tmp_path))
    as_json = run_zoo("bench", "--spec", spec, *TINY_BENCH, "--no-save", "--json")
    assert as_json.returncode == 0 and as_json.stderr == ""  # no progress bar on a pipe
    assert json.loads(as_json.stdout)["arch"] == "tiny-qwen3"
    rows = list(
        csv.reader(io.StringIO(run_zoo("bench", "--spec", spec, *TINY_BENCH, "--no-save", "--format", "csv").stdout))
    )
    header, values = rows  # one row, every column, raw numbers (the human table is --format table)
    row = dict(zip(header, values))
    assert row["arch"] == "tiny-qwen3" and row["kv_bytes_per_token"].isdigit()


def test_compare_piped_is_plain_names_the_kv_dtype_and_has_every_format():
    args = ["compare", "--arch", "llama-3.2-1b", "--attention", "mha,gqa,mqa", "--analysis-only"]
    table = run_zoo(*args)
    assert table.returncode == 0 and table.stderr == ""
    header, *lines = table.stdout.splitlines()
    assert "kv bytes per token (float32)" in header and "│" not in table.stdout and len(lines) == 3
    assert max(len(line) for line in table.stdout.splitlines()) < 160  # as wide as the content, not 250
    rows = json.loads(run_zoo(*args, "--json").stdout)["rows"]
    assert [r["dtype"] for r in rows] == ["float32"] * 3
    kv = {r["label"]: r["kv_bytes_per_token"] for r in rows}
    assert kv["attention.kind=mha"] == 32 * kv["attention.kind=mqa"]
    as_csv = list(csv.DictReader(io.StringIO(run_zoo(*args, "--csv").stdout)))  # the old flag: --format csv
    assert [int(r["kv_bytes_per_token"]) for r in as_csv] == [r["kv_bytes_per_token"] for r in rows]


def test_compare_with_every_row_failed_exits_1():
    result = run_zoo("compare", "--arch", "llama-3.2-1b", "--vary", "attention.n_kv_heads=3,5", "--analysis-only")
    assert result.returncode == 1 and "every row failed" in result.stderr


def test_sweep_resume_with_nothing_left_says_where_the_rows_came_from(tmp_path):
    write_tiny_spec(tmp_path)
    (tmp_path / "s.toml").write_text(
        textwrap.dedent("""\
        name = "s"
        spec_file = "tiny.yaml"
        analysis_only = true
        [vary]
        "attention.kind" = ["mha", "mqa"]
    """)
    )
    first = run_zoo("sweep", str(tmp_path / "s.toml"), "--results-dir", str(tmp_path / "r"))
    assert first.returncode == 0 and "nothing measured" not in first.stderr
    again = run_zoo("sweep", str(tmp_path / "s.toml"), "--results-dir", str(tmp_path / "r"), "--resume", "--json")
    assert again.returncode == 0 and len(json.loads(again.stdout)["rows"]) == 2
    assert "nothing measured" in again.stderr and str(tmp_path / "r" / "s.jsonl") in again.stderr
    assert "finished" in again.stderr


def test_the_readme_compare_snippet_runs_as_a_plain_script(tmp_path):
    """No `if __name__ == "__main__":` guard: the runs must not re-run the script."""
    spec = write_tiny_spec(tmp_path)
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(f"""\
        import zoo

        df = zoo.compare(zoo.ModelSpec.from_file({str(spec)!r}), vary={{"positional.kind": ["rope", "alibi"]}},
                         device="cpu", prompt_len=8, gen_len=4, repeats=1, threads=1)
        print(list(df["status"]))
    """)
    )
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=environment(), timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "['ok', 'ok']\n", (result.stdout, result.stderr)


def test_bench_shows_progress_on_a_terminal_only(tmp_path):
    from tests.cli.pipes import zoo_on_a_terminal

    spec = str(write_tiny_spec(tmp_path))
    status, out = zoo_on_a_terminal("bench", "--spec", spec, *TINY_BENCH, "--no-save", columns=120)
    # the bar (which phase labels it shows depends on how long each took; its last, "done", is always
    # drawn), then the table
    assert status == 0 and "bench: done" in out and "decode tokens/s" in out

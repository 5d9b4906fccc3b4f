"""`zoo compare --contexts` and `zoo sweep --contexts`: the per-context table, every value
marked measured or predicted, one-line errors, the files --save writes."""

from __future__ import annotations

import json
import re

import pytest

from tests.harness.sweep_helpers import write_sweep_file, write_tiny_spec
from zoo.cli import main

HYBRID = 'layers={},{"0": {attention: {kind: mamba, d_state: 4}}}'


def _analysis_only(tmp_path, *extra):  # type: ignore[no-untyped-def]
    spec = write_tiny_spec(tmp_path)
    return ["compare", "--spec", str(spec), "--vary", HYBRID, "--contexts", "16,32,1k", "--analysis-only", *extra]


def test_the_table_has_one_row_per_variant_and_context(tmp_path, capsys):
    assert main(_analysis_only(tmp_path)) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("variant") and "context" in line)
    assert re.split(r"\s{2,}", header) == [
        "variant",
        "context",
        "memory MiB",
        "cache MiB",
        "memory vs baseline",
        "decode tokens/s",
        "decode",
        "decode vs baseline",
        "decode basis",
        "note",
    ]
    rows = [line for line in out.splitlines() if "predicted" in line]
    assert len(rows) == 6 and all("roofline h100-sxm" in row for row in rows)
    assert [re.split(r"\s{2,}", row)[1] for row in rows] == ["16", "32", "1k"] * 2
    assert sum("beyond max_seq_len 64" in row for row in rows) == 2
    # the hybrid (one Mamba layer of two) holds less cache at 1k: a crossover in memory is reported
    assert re.search(
        r"^crossover: mamba\(d_state=4\) @0 (overtakes|falls behind) layers=none in memory at [\d,]+ tokens", out, re.M
    )  # short variant labels, not the override dicts


def test_json_marks_every_value_measured_predicted_or_analysis(tmp_path, capsys):
    assert main(_analysis_only(tmp_path, "--json", "--predict", "l4")) == 0
    document = json.loads(capsys.readouterr().out)
    assert len(document["rows"]) == 2 and len(document["contexts"]) == 6
    for record in document["contexts"]:
        assert record["memory_source"] == "analysis" and record["decode_source"] == "predicted"
        assert record["decode_basis"] == "roofline l4, 2 layers" and record["decode_tokens_per_s"] > 0
        assert record["memory_bytes"] == record["weight_bytes"] + record["cache_bytes"]
    assert isinstance(document["crossovers"], list)


def test_csv_is_the_per_context_table(tmp_path, capsys):
    assert main(_analysis_only(tmp_path, "--csv")) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 7
    header = lines[0].split(",")
    for column in (
        "label",
        "layers",
        "context",
        "memory_bytes",
        "cache_bytes",
        "decode_tokens_per_s",
        "decode_source",
        "decode_basis",
        "memory_source",
        "decode_tokens_per_s_vs_baseline",
    ):
        assert column in header


def test_timed_compare_measures_the_small_contexts_and_saves_plots(tmp_path, capsys):
    spec = write_tiny_spec(tmp_path)
    argv = [
        "compare",
        "--spec",
        str(spec),
        "--vary",
        HYBRID,
        "--contexts",
        "8,16,48",
        "--measure-up-to",
        "16",
        "--device",
        "cpu",
        "--prompt-len",
        "8",
        "--gen-len",
        "4",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--save",
        "ctx",
        "--results-dir",
        str(tmp_path / "r"),
        "--json",
    ]
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    sources = [(r["context"], r["decode_source"]) for r in document["contexts"]]
    assert sources == [(8, "measured"), (16, "measured"), (48, "predicted")] * 2
    for name in ("ctx-contexts.csv", "ctx-contexts.md", "ctx-memory-context.png", "ctx-decode-context.png"):
        assert (tmp_path / "r" / name).stat().st_size > 0


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--contexts", "4x"], "--contexts: '4x' is not a context length"),
        (["--contexts", "4k,4096"], "--contexts: 4k given twice"),
        (["--contexts", ""], "--contexts: '' is not a context length"),
        (["--contexts", "4k", "--measure-up-to", "zero"], "--measure-up-to: 'zero' is not a context length"),
    ],
)
def test_bad_context_options_exit_2_with_one_line(tmp_path, capsys, extra, message):
    assert main(["compare", "--arch", "llama-3.2-1b", "--attention", "mha,gqa", "--analysis-only", *extra]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("zoo: error:") and message in err


def test_sweep_takes_contexts_and_refuses_bad_ones_before_running(tmp_path, capsys):
    path = write_sweep_file(tmp_path, failing_point=False)
    assert main(["sweep", str(path), "--contexts", "1k,", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--contexts: '' is not a context length" in err
    assert not (tmp_path / "grid.jsonl").exists()

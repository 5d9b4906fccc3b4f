"""`zoo bench` reports state bytes (fixed per sequence) beside KV bytes (per token)."""

from __future__ import annotations

import json

import zoo
from tests.conftest import tiny_spec
from zoo.cli import main

GQA = {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2, "head_dim": 16}


def test_bench_of_a_hybrid_reports_state_bytes_beside_kv_bytes(tmp_path, capsys):
    spec = tiny_spec("qwen3-0.6b").override(
        {"attention": {"kind": "mamba", "d_state": 4}, "layers": {"1": {"attention": GQA}}}
    )
    path = tmp_path / "hybrid.yaml"
    path.write_text(spec.to_yaml())
    argv = [
        "bench",
        "--spec",
        str(path),
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
        "--no-save",
    ]
    assert main([*argv, "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    cache = zoo.analysis.counts.cache_bytes(spec, 1, 12, dtype="float32")
    assert m["kv_bytes_per_token"] == 2 * 2 * 16 * 4 and m["state_bytes"] == cache.sequence > 0  # K and V, 1 layer
    assert m["kv_bytes"] == cache.total == 12 * m["kv_bytes_per_token"] + m["state_bytes"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [
        next(i for i, line in enumerate(lines) if line.startswith(label))
        for label in ("KV bytes per token", "state bytes per sequence", "KV + state bytes at context 12")
    ]
    assert rows == [rows[0], rows[0] + 1, rows[0] + 2]
    assert f"{m['state_bytes']:,}" in lines[rows[1]]

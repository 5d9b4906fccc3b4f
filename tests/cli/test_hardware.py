"""`zoo hardware`: the host's measured peaks, from the cache the session seeded (tests/conftest.py)."""

from __future__ import annotations

import json

from zoo.cli import main


def test_hardware_prints_the_cached_host_peaks_as_json(capsys):
    assert main(["hardware", "--threads", "1", "--json"]) == 0
    host = json.loads(capsys.readouterr().out)["host"]
    assert host["machine"]["threads"] == 1 and host["bandwidth"] == 20e9 and host["matmul_flops"]["bfloat16"] == 200e9


def test_hardware_prints_a_table(capsys):
    assert main(["hardware", "--threads", "2", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert "roofline bandwidth,20.0,GB/s" in out and "matmul float32,100.0,GFLOP/s" in out


def test_bad_threads_is_one_line(capsys):
    assert main(["hardware", "--threads", "0"]) == 2
    assert capsys.readouterr().err.strip() == "zoo: error: --threads: 0 (allowed: 1 or more)"

"""bench/family_speed.py on one small case: a quantized variant runs beside the float one, its
bytes per step those of its quantized weights, each decode against its sampled roofline."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_quantized_weights_are_variants_with_their_own_bytes(capsys, monkeypatch):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("family_speed", BENCH / "family_speed.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules["family_speed"] = script  # dataclasses look their module up there
    spec.loader.exec_module(script)
    monkeypatch.setattr(script, "probe_bytes", lambda: 8 << 20)  # a small probe: the table's wiring, not its figures
    argv = ["--families", "gpt2", "--layers", "1", "--dtypes", "bfloat16", "--weights", "float,int8,int4"]
    argv += ["--impls", "auto", "--rounds", "1", "--decode", "4", "--prompt-len", "8", "--threads", "1"]
    monkeypatch.setattr(sys, "argv", ["family_speed.py", *argv])
    script.main()
    out = capsys.readouterr().out.splitlines()
    header = next(line for line in out if line.startswith("| family |"))
    names = [cell.strip() for cell in header.split("|")[1:-1]]
    rows = [dict(zip(names, (c.strip() for c in line.split("|")[1:-1]), strict=True)) for line in out[-3:]]
    assert [row["weights"] for row in rows] == ["float", "int8", "int4"]
    megabytes = [float(row["MB per step"]) for row in rows]
    assert megabytes[0] > megabytes[1] > megabytes[2]  # bf16, then int8, then int4 panels with their scales
    assert all(row["of sampled roofline"].endswith("%") and row["vs first"] for row in rows)

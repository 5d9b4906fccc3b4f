"""bench/eager_step_split.py: every C++ call of an eager step is timed into its part, an int4
model's head product (bound once by ``int4_cpu``, not through ``CppExtension.op``) among the
products rather than in the rest."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _script(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules[name] = script  # dataclasses look their module up there; the split imports family_speed
    spec.loader.exec_module(script)
    return script


def test_an_int4_heads_product_is_timed_as_a_product(monkeypatch):  # type: ignore[no-untyped-def]
    _script("family_speed")
    split = _script("eager_step_split")
    from zoo.quant import int4_cpu

    original = int4_cpu._MM
    spent: dict[str, float] = {"products": 0.0}
    packed, scale_offsets = int4_cpu.pack(torch.randint(0, 16, (32, 64)), torch.rand(32, 2, 2))
    x = torch.randn(1, 64)
    with split.timed_ops(spent, cached=False):
        first = int4_cpu.matmul(x, packed, scale_offsets)
    assert spent["products"] > 0.0
    spent["products"] = 0.0
    with split.timed_ops(spent, cached=True):  # the no-weights pass: the first output, kept
        again = int4_cpu.matmul(x, packed, scale_offsets)
        kept = int4_cpu.matmul(torch.randn(1, 64), packed, scale_offsets)
    assert torch.equal(first, again) and torch.equal(kept, again) and spent["products"] > 0.0
    assert int4_cpu._MM is original  # put back

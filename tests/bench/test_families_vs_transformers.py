"""bench/families_vs_transformers.py on one small case: both libraries run one checkpoint, and a
decode row carries zoo's fraction of the round's roofline and the ratio that roofline bounds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("families_vs_transformers", BENCH / "families_vs_transformers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["families_vs_transformers"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_agreeing_counts_the_tokens_before_the_first_that_differs():
    agreeing = _load()._agreeing
    ours = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])  # (B, n)
    assert agreeing(ours, ours.clone(), None) is None
    theirs = ours.clone()
    theirs[1, 2] = 0  # one sequence differs from its third token
    assert agreeing(ours, theirs, None) == 2
    assert agreeing(ours, theirs, 1) == 1 and agreeing(ours, ours.clone(), 3) == 3


def test_a_decode_row_carries_its_roofline_fraction_and_bound(capsys, monkeypatch):  # type: ignore[no-untyped-def]
    pytest.importorskip("transformers")
    script = _load()
    monkeypatch.setattr(script, "probe_bytes", lambda: 8 << 20)  # a small probe: the bound's arithmetic, not its figure
    argv = ["--families", "gpt2", "--layers", "1", "--rounds", "1", "--decode", "2", "--prompt", "8", "--threads", "1"]
    assert script.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line.split("|")[2:-1] for line in out if line.startswith("| gpt2 |")]  # after the model's name
    names = ["phase", "zoo", "hf", "ratio", "fraction", "bound", "impl", "same"]
    prefill, decode = (dict(zip(names, row, strict=True)) for row in rows[-2:])
    assert prefill["fraction"].strip() == "-" and decode["same"].strip() == "yes"
    assert decode["fraction"].strip().endswith("%") and float(decode["bound"].strip().rstrip("x")) > 0


def test_a_decode_is_sampled_just_before_and_just_after_and_an_encoder_pass_not_at_all():
    """Each side's decode divides by the mean of two bandwidth samples taken around it (this
    host's memory changes speed within seconds); an encoder pass has no decode to sample."""
    import zoo

    script = _load()
    model = zoo.build(zoo.spec("gpt2").override({"n_layers": 1}), dtype="float32", seed=0).eval()
    samples, taken = iter([10.0, 30.0]), []

    def sample() -> float:
        taken.append(next(samples))
        return taken[-1]

    ids = torch.randint(1, 100, (1, 4))
    with torch.inference_mode():
        first, decode, tokens, bandwidth = script.zoo_runner(model, "causal", 1, 4, 2)(ids, 2, sample)
        assert taken == [10.0, 30.0] and bandwidth == 20.0 and tokens.shape == (1, 3) and decode > 0
        assert script.zoo_runner(model, "encoder", 1, 4, 2)(ids, 2, sample)[3] == 0.0 and len(taken) == 2

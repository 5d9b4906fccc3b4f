"""Booleans are not numbers, infinities and NaN are refused with the real value, seeds fit 64 bits."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zoo
from zoo.errors import BenchError, GenerationError, SpecError
from zoo.harness.run_config import make_config
from zoo.model.sampling import SamplingSettings, check_seed


@pytest.mark.parametrize("override", ["vocab_size=true", "n_layers=false", "attention.n_heads=true", "ffn.hidden=true"])
def test_booleans_are_not_integers(override):
    with pytest.raises(SpecError, match="not the boolean"):
        zoo.spec("gpt2").override([override])


def test_booleans_still_set_boolean_fields():
    assert zoo.spec("gpt2").override(["tie_embeddings=false"]).tie_embeddings is False


@settings(max_examples=30, deadline=None)
@given(
    value=st.sampled_from([math.inf, -math.inf, math.nan]),
    key=st.sampled_from(["positional.theta", "norm.eps", "embedding_scale"]),
)
def test_non_finite_floats_are_refused_with_their_value(value, key):
    spec = zoo.spec("llama-3.2-1b")
    with pytest.raises(SpecError) as info:
        spec.override({key: value})
    assert "finite" in str(info.value) and repr(value) in str(info.value)


def test_inf_text_reports_inf_not_none():
    with pytest.raises(SpecError, match="finite number \\(got 'inf'\\)"):
        zoo.spec("llama-3.2-1b").override(["positional.theta=inf"])


@pytest.mark.parametrize("seed", [-1, 2**64, 10**30, True])
def test_seed_out_of_range(seed):
    with pytest.raises(BenchError, match="seed"):
        make_config(seed=seed)
    with pytest.raises(GenerationError, match="seed"):
        check_seed(seed)
    with pytest.raises(SpecError, match="seed"):
        zoo.build(zoo.spec("gpt2").override({"n_layers": 1}), device="meta", seed=seed)


def test_largest_seed_is_accepted():
    assert make_config(seed=2**64 - 1).seed == 2**64 - 1
    check_seed(2**64 - 1)


@pytest.mark.parametrize("field", ["batch_size", "prompt_len", "repeats", "threads"])
def test_bench_options_refuse_booleans(field):
    with pytest.raises(BenchError, match="boolean"):
        make_config(**{field: True})


@pytest.mark.parametrize("temperature", [math.inf, math.nan, -1.0])
def test_temperature_must_be_finite(temperature):
    with pytest.raises(GenerationError, match="finite number"):
        SamplingSettings(temperature)

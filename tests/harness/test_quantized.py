"""A quantized run: the Row's bytes from the layout, fidelity and perplexity columns,
and `zoo compare --vary weights_dtype=...` rows."""

from __future__ import annotations

import pytest

import zoo
from tests.conftest import tiny_spec
from zoo.analysis.counts import weight_bytes
from zoo.errors import BenchError
from zoo.harness.run_config import make_config

RUN = {"prompt_len": 8, "gen_len": 4, "repeats": 1, "device": "cpu", "threads": 1}


def _spec():
    return tiny_spec("llama-3.2-1b").override({"ffn.hidden": 64, "vocab_size": 300})


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_a_quantized_run_reports_layout_bytes_and_fidelity(kind, tmp_path):
    text = tmp_path / "eval.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 4)
    m = zoo.bench(_spec(), weights_dtype=kind, eval_text=str(text), **RUN)
    assert m.weights_dtype == kind and m.environment.dtype == "bfloat16"
    assert m.weight_bytes == weight_bytes(_spec(), "bfloat16", kind)
    assert m.weight_bytes < weight_bytes(_spec(), "bfloat16")
    assert 0 < m.fidelity_max_logit_error < 1 and 0 <= m.fidelity_kl < 0.01
    assert m.eval_perplexity > 1 and m.eval_perplexity_reference > 1
    assert abs(m.eval_perplexity - m.eval_perplexity_reference) < 0.05 * m.eval_perplexity_reference


def test_an_unquantized_run_has_no_fidelity_columns():
    m = zoo.bench(_spec(), weights_dtype="bf16", **RUN)
    assert m.weights_dtype == "bf16" and m.environment.dtype == "bfloat16"
    assert m.fidelity_max_logit_error is None and m.fidelity_kl is None and m.eval_perplexity is None
    assert m.weight_bytes == zoo.count_params(_spec()).total * 2


@pytest.mark.parametrize(
    "options,message",
    [
        ({"weights_dtype": "int2"}, "weights_dtype: 'int2'"),
        ({"weights_dtype": "int4", "weights_group_size": 100}, "weights_group_size: 100"),
        ({"weights_dtype": "float32", "dtype": "bfloat16"}, "contradicts dtype"),
    ],
)
def test_bad_weights_options_are_bench_errors(options, message):
    with pytest.raises(BenchError, match=message):
        zoo.bench(_spec(), **{**RUN, **options})


def test_eval_text_must_be_readable(tmp_path):
    with pytest.raises(BenchError, match="cannot read eval_text file"):
        zoo.bench(_spec(), **{**RUN, "eval_text": str(tmp_path / "absent.txt")})


def test_compare_varies_weights_dtype():
    frame = zoo.compare(_spec(), vary={"weights_dtype": ["bf16", "int8", "int4"]}, measure=False, device="cpu")
    sizes = dict(zip(frame["weights_dtype"], frame["weight_bytes"]))
    assert sizes["int4"] < sizes["int8"] < sizes["bf16"] == weight_bytes(_spec(), "bfloat16")
    assert make_config(weights_dtype="BFloat16").weights_dtype == "bf16"

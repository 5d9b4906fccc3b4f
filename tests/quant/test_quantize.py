"""Quantizing a whole model: which layers change, bytes shared by analysis and model, options."""

import pytest
import torch

import zoo
from tests.conftest import tiny_spec
from zoo.analysis.counts import decode_bytes_per_step, weight_bytes
from zoo.errors import BenchError
from zoo.quant import normalize, quantize, run_dtype, stored_bytes
from zoo.quant.linear import QuantizedLinear


def _spec():
    return tiny_spec("llama-3.2-1b").override({"ffn.hidden": 64})


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_every_linear_is_quantized_and_logits_stay_close(kind):
    spec = _spec()
    model = zoo.build(spec, dtype="bfloat16", seed=0).eval()
    tokens = torch.randint(spec.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        reference = model(tokens).float()
        quantize(model, kind)
        got = model(tokens).float()
    assert not [m for m in model.modules() if type(m) is torch.nn.Linear or type(m).__name__ == "Linear"]
    assert sum(isinstance(m, QuantizedLinear) for m in model.modules()) == 2 * 7 + 1  # q k v o gate up down, head
    if kind == "int8":  # the tied input table reads the head's int8 rows: one matrix stored
        assert (
            model.embed.quantized_rows.qweight is model.lm_head.qweight
            and model.embed.quantized_rows.scales is model.lm_head.scales
        )
    else:  # int4's packed layout has no rows to read: the table gets int8 rows of its own
        assert model.embed.quantized_rows.qweight.dtype == torch.int8 and model.embed.quantized_rows.qweight.shape == (
            spec.vocab_size,
            64,
        )
    assert (got - reference).abs().max() < 0.2 * reference.abs().max()


@pytest.mark.parametrize("kind,group", [("int8", None), ("int4", 32), ("int4", 64), ("bf16", None), ("float32", None)])
def test_analysis_bytes_equal_the_built_models_layout(kind, group):
    spec = _spec()
    dtype = run_dtype(kind, None, "float32")
    model = quantize(zoo.build(spec, dtype=dtype, seed=0), kind, group)
    assert weight_bytes(spec, dtype, kind, group) == stored_bytes(model)


def test_tied_embedding_rows_are_int8_rows_of_the_table():
    model = zoo.build(_spec(), dtype="float32", seed=0)
    table = model.embed.weight.detach().clone()
    quantize(model, "int8")
    ids = torch.tensor([[0, 5, 96]])
    torch.testing.assert_close(model.embed.lookup(ids)[0], model.lm_head.dequantize()[ids[0]])
    int4 = quantize(zoo.build(_spec(), dtype="float32", seed=0), "int4")
    step = table.abs().amax(1) / 127  # (vocab,)
    assert ((int4.embed.lookup(ids)[0] - table[ids[0]]).abs() <= step[ids[0], None] / 2 + 1e-7).all()


def test_quantized_reads_fewer_bytes_per_step():
    spec = zoo.spec("llama-3.2-1b")
    dense = decode_bytes_per_step(spec, 1, 128, "bfloat16")
    int8 = decode_bytes_per_step(spec, 1, 128, "bfloat16", "int8")
    int4 = decode_bytes_per_step(spec, 1, 128, "bfloat16", "int4", 32)
    assert int4 < int8 < 0.55 * dense


def test_names_and_bad_values():
    assert normalize("bfloat16") == "bf16" and normalize("INT4") == "int4" and normalize(None) is None
    with pytest.raises(BenchError, match="weights_dtype: 'int3'.*int8"):
        normalize("int3")
    with pytest.raises(BenchError, match="weights_group_size: 48 .*32"):
        quantize(zoo.build(_spec(), device="meta"), "int4", 48)
    with pytest.raises(BenchError, match="weights_group_size: 128 does not divide in_features=64"):
        quantize(zoo.build(_spec(), device="meta"), "int4", 128)
    with pytest.raises(BenchError, match="contradicts dtype"):
        run_dtype("bf16", "float32", "float32")
    assert run_dtype("int8", None, "float32") == "bfloat16" and run_dtype(None, None, "float32") == "float32"


def test_a_quantized_head_keeps_what_the_build_declared():
    """The head's place keeps its family, logits and tying on the model, not on the swapped module."""
    spec = tiny_spec("gpt2").override({"tie_embeddings": False, "n_layers": 1})
    model = zoo.build(spec, dtype="float32", seed=0)
    quantize(model, "int8")
    assert isinstance(model.lm_head, QuantizedLinear)
    assert model.part_families["lm_head"] == "unembedding" and model.can_generate and not model.head_tied
    # the head's parameters are gone (packed int8 buffers); what remains of it counts as unembedding:
    # GPT-2's head has no bias, so nothing
    counts = zoo.count_params(model).by_component
    assert counts.get("unembedding", 0) == 0
    assert counts["embedding"] == 97 * 64 and counts["positional"] == 64 * 64  # token table (V, d); positions (T, d)

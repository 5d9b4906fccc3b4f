"""One run for every topology: sweep rows and bench rows of encoders and encoder-decoders carry
their own columns (None where a topology has none), measured by the phases that apply."""

from __future__ import annotations

import pandas as pd
import pytest

import zoo
from zoo.analysis.counts import cache_bytes, encoder_flops, forward_flops, topology
from zoo.harness.run import measure_in_subprocess
from zoo.harness.run_config import make_config
from zoo.harness.sweep.executors import InlineExecutor

SMALL = [
    "n_layers=1",
    "d_model=32",
    "attention.n_heads=2",
    "attention.head_dim=16",
    "ffn.hidden=64",
    "vocab_size=128",
    "max_seq_len=64",
]
RUN = {"device": "cpu", "prompt_len": 8, "gen_len": 3, "repeats": 1, "threads": 1}


def tiny(arch: str):  # type: ignore[no-untyped-def]
    extra = (
        ["encoder.n_layers=1", "cross_attention.n_heads=2", "cross_attention.head_dim=16"]
        if arch == "transformer-base"
        else []
    )
    return zoo.spec(arch).override([*SMALL, *extra])


def test_the_topology_is_decided_once_from_the_built_model():
    assert [topology(a) for a in ("gpt2", "bert-base-uncased", "t5-small")] == ["decoder", "encoder", "encoder-decoder"]
    assert topology(zoo.spec("gpt2").override({"attention.causal": False, "head.kind": "none"})) == "encoder"


def test_mixed_topologies_analysis_columns_per_topology(tmp_path):
    """arch=bert,gpt2,t5 in one grid: each row has its topology's columns; an encoder's KV
    columns are empty (no cache), not 0; the tables and plots render."""
    frame = zoo.compare(
        "gpt2",
        {"arch": ["bert-base-uncased", "gpt2", "t5-small"]},
        measure=False,
        dtype="float32",
        results_dir=tmp_path,
        name="mixed",
    )
    assert (tmp_path / "mixed.md").read_text().startswith("| arch |") and (tmp_path / "mixed-params-kv.png").exists()
    rows = {r["arch"]: r for r in frame.to_dict("records")}
    assert list(frame["status"]) == ["ok"] * 3 and list(frame["topology"]) == ["encoder", "decoder", "encoder-decoder"]
    bert, gpt2, t5 = rows["bert-base-uncased"], rows["gpt2"], rows["t5-small"]
    # missing, not 0 (integer columns are nullable integers: None here, never NaN turning 28 into 28.0)
    assert all(
        pd.isna(bert[c]) for c in ("kv_bytes_per_token", "kv_bytes", "flops_per_token", "cross_kv_bytes_per_token")
    )
    assert bert["encoder_flops"] == forward_flops("bert-base-uncased", 128, 128) and bert["params_total"] == 109_482_240
    assert gpt2["kv_bytes_per_token"] == zoo.kv_bytes_per_token("gpt2", "float32") and pd.isna(gpt2["encoder_flops"])
    per = cache_bytes("t5-small", 1, 1, 1, dtype="float32")
    assert (t5["kv_bytes_per_token"], t5["cross_kv_bytes_per_token"]) == (per.token, per.memory) == (24_576, 24_576)
    assert t5["kv_bytes"] == cache_bytes("t5-small", 1, 16, 128, dtype="float32").total  # gen 16 + 128 encoder tokens
    assert t5["encoder_flops"] == encoder_flops("t5-small", 128)


def test_compare_measures_an_encoder_and_an_encoder_decoder():
    """Each variant in its own (forked) process, by the phases of its topology."""
    frame = zoo.compare(tiny("bert-base-uncased"), {"positional.kind": ["learned", "sinusoidal"]}, depth=None, **RUN)
    assert list(frame["status"]) == ["ok", "ok"], list(frame["error"])
    assert (frame["encoder_tokens_per_s"] > 0).all() and frame["decode_tokens_per_s"].isna().all()
    assert frame["kv_bytes"].isna().all() and (frame["peak_bytes"] > 0).all()
    frame = zoo.compare(tiny("transformer-base"), {"attention.kind": ["mha", "mqa"]}, depth=None, **RUN)
    assert list(frame["status"]) == ["ok", "ok"], list(frame["error"])
    assert (frame["decode_tokens_per_s"] > 0).all() and (frame["prefill_tokens_per_s"] > 0).all()
    assert list(frame["self_kv_bytes"]) == [3 * 2 * 32 * 4, 3 * 2 * 16 * 4]  # 3 tokens x K,V x kv width x fp32
    assert list(frame["cross_kv_bytes"]) == [8 * 2 * 32 * 4] * 2  # the cross-attention stays mha


def test_a_fresh_interpreter_runs_the_same_phases():
    m = measure_in_subprocess(tiny("transformer-base"), make_config(**RUN))
    assert m.topology == "encoder-decoder" and m.phases == ["encode", "prefill", "decode"] and m.decode_tokens_per_s > 0
    assert m.itl_steps == (RUN["gen_len"] - 1) * RUN["repeats"]


def test_reduced_depth_cuts_the_encoder_too():
    from zoo.harness.sweep.points import reduced_depth

    cut = reduced_depth(zoo.spec("t5-small"), 2)
    assert (cut.n_layers, cut.encoder.n_layers) == (2, 2)
    assert reduced_depth(zoo.spec("t5-small"), None).encoder.n_layers == 6


@pytest.mark.parametrize("option,field", [({"weights_dtype": "int8"}, "weights_dtype"), ({"compile": True}, "compile")])
def test_decoder_only_options_fail_the_encoder_row_with_one_line(option, field):
    frame = zoo.compare(
        tiny("bert-base-uncased"), {"positional.kind": ["learned"]}, executor=InlineExecutor(), **{**RUN, **option}
    )
    assert list(frame["status"]) == ["failed"] and frame["error"][0].startswith(f"{field}: ")


def test_zoo_bench_measures_an_encoder_by_its_phases():
    m = zoo.bench(tiny("bert-base-uncased"), device="cpu", prompt_len=8, repeats=1, threads=1)
    assert m.topology == "encoder" and m.phases == ["encode"] and m.self_kv_bytes is None and m.kv_bytes is None
    with pytest.raises(zoo.errors.BenchError, match="gen_len: read by the decode, prefill phase; .* is an encoder"):
        zoo.bench(tiny("bert-base-uncased"), **RUN)


def test_zoo_bench_of_an_encoder_checkpoint_is_an_encoder_row(tmp_path):  # type: ignore[no-untyped-def]
    from tests.hub.encoder_checkpoints import save_tiny_bert

    n_params = save_tiny_bert(tmp_path)
    m = zoo.bench(None, weights=str(tmp_path), device="cpu", prompt_len=8, repeats=1)
    assert isinstance(m, zoo.Row) and m.topology == "encoder" and m.params_total == n_params


def test_zoo_bench_without_a_spec_or_weights_names_what_is_missing():
    with pytest.raises(zoo.errors.BenchError, match="give a spec \\(an architecture\\) or weights to benchmark"):
        zoo.bench(None)

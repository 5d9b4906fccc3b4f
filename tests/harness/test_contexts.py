"""Memory and decode tokens/s against context length (zoo.harness.contexts): parsing, the
per-context records (measured or predicted), crossovers and the files --save writes."""

from __future__ import annotations

import textwrap

import pandas as pd
import pytest

import zoo
from tests.harness.sweep_helpers import TINY_RUN, write_tiny_spec
from zoo.errors import BenchError
from zoo.harness.context_lengths import parse_context, parse_contexts
from zoo.harness.contexts import StepTimeModel, context_frame, crossovers
from zoo.harness.report.contexts import crossover_lines
from zoo.harness.sweep.executors import InlineExecutor
from zoo.harness.sweep.grid import SweepPlan

MAMBA = {"kind": "mamba", "d_state": 4, "expand": 2, "d_conv": 4}


@pytest.mark.parametrize(
    "text,value", [("4k", 4096), ("4K", 4096), ("128k", 131072), ("1000", 1000), (512, 512), (" 8k ", 8192)]
)
def test_context_lengths_take_a_k_suffix(text, value):
    assert parse_context(text) == value


@pytest.mark.parametrize("text", ["4x", "0", "-1", "", "1.5k", "k", True, "99999999k"])
def test_a_bad_context_length_names_the_option(text):
    with pytest.raises(BenchError, match="^--contexts: .* is not a context length; allowed: positive integers"):
        parse_context(text)


def test_context_lists_are_sorted_and_each_length_given_once():
    assert parse_contexts("32k,4k,128k") == [4096, 32768, 131072]
    assert parse_contexts(["8k", 1024]) == [1024, 8192]
    with pytest.raises(BenchError, match="4k given twice"):
        parse_contexts("4k,4096")
    with pytest.raises(BenchError, match="no context lengths"):
        parse_contexts([])


def test_encoder_rows_get_no_cache_or_decode_at_a_context():
    frame = zoo.compare("bert-base-uncased", vary={"positional.kind": ["learned"]}, measure=False, contexts="512")
    (record,) = frame.attrs["contexts"]
    assert record["cache_bytes"] is None and record["decode_tokens_per_s"] is None and record["memory_bytes"] is None
    assert record["note"] == "contexts are for decoders; bert-base-uncased is an encoder (see its bench columns)"


def test_contexts_change_point_ids_only_when_given():
    plain = SweepPlan(arch="gpt2", vary={"seed": [0]})
    with_contexts = SweepPlan(arch="gpt2", vary={"seed": [0]}, contexts=["4k"])
    assert with_contexts.contexts == [4096]
    assert plain.expand()[0].id != with_contexts.expand()[0].id
    assert plain.expand()[0].id == SweepPlan(arch="gpt2", vary={"seed": [0]}, contexts=[]).expand()[0].id


def test_analysis_only_predicts_every_context_with_the_roofline(tmp_path):
    spec = zoo.ModelSpec.from_file(write_tiny_spec(tmp_path))
    frame = zoo.compare(spec, vary={"attention": ["gqa", MAMBA]}, measure=False, contexts="16,32,128", dtype="float32")
    contexts = pd.DataFrame(frame.attrs["contexts"])
    assert len(contexts) == 6 and list(contexts["context"]) == [16, 32, 128] * 2
    assert set(contexts["decode_source"]) == {"predicted"} and set(contexts["memory_source"]) == {"analysis"}
    assert contexts["decode_basis"].str.startswith("roofline h100-sxm, 2 layers").all()
    for record in contexts.to_dict("records"):
        variant = spec.override({"attention": MAMBA} if "mamba" in record["label"] else {})
        cache = zoo.analysis.counts.cache_bytes(variant, 1, record["context"], dtype="float32")
        assert record["cache_bytes"] == cache.total and record["cache_sequence_bytes"] == cache.sequence
        assert record["memory_bytes"] == zoo.analysis.counts.weight_bytes(variant, "float32") + cache.total
    assert list(contexts["note"].isna()) == [True, True, False] * 2  # 128 > max_seq_len 64
    mamba = contexts[contexts["label"].str.contains("mamba")]
    assert mamba["cache_bytes"].nunique() == 1 and mamba["cache_token_bytes"].eq(0).all()


def test_timed_contexts_are_measured_up_to_the_limit_and_predicted_beyond(tmp_path):
    spec = zoo.ModelSpec.from_file(write_tiny_spec(tmp_path))
    frame = zoo.compare(
        spec,
        vary={"attention.kind": ["gqa"]},
        contexts=[8, 16, 32, 48],
        measure_up_to=16,
        executor=InlineExecutor(),
        depth=1,
        **TINY_RUN,
    )
    records = frame.attrs["contexts"]
    assert [r["decode_source"] for r in records] == ["measured", "measured", "predicted", "predicted"]
    assert records[0]["decode_basis"] == "cpu, 1 layer" and records[0]["measured_peak_bytes"] > 0
    assert records[2]["decode_basis"] in ("bytes/step scaled from 16", "fit of step time on bytes/step, 8-16")
    assert all(r["decode_tokens_per_s"] > 0 for r in records)


def _run(context, nbytes, tokens_per_s, batch=1):
    return {
        "context_len": context,
        "decode_bytes_per_step": nbytes,
        "decode_tokens_per_s": tokens_per_s,
        "config": {"batch_size": batch},
    }


def test_the_step_time_model_scales_time_with_bytes_read():
    # one run, two runs (too few to fit through noise), equal bytes (recurrent state): proportional
    assert StepTimeModel([_run(2048, 2e6, 100.0)]).predict(4e6) == (pytest.approx(50.0), "bytes/step scaled from 2k")
    two = StepTimeModel([_run(1024, 1e6, 500.0), _run(4096, 3e6, 250.0)])
    assert two.predict(6e6) == (pytest.approx(125.0), "bytes/step scaled from 4k")
    flat = StepTimeModel([_run(1024, 2e6, 100.0), _run(2048, 2e6, 95.0), _run(4096, 2e6, 90.0)])
    assert flat.predict(2e6) == (pytest.approx(90.0), "bytes/step scaled from 4k")
    assert StepTimeModel([_run(16, 1e6, 400.0, batch=4)]).predict(1e6)[0] == pytest.approx(400.0)


def test_three_runs_fit_fixed_time_plus_bytes_over_bandwidth():
    # 1 ms + 1 ns per byte
    runs = [_run(1024, 1e6, 500.0), _run(2048, 2e6, 1 / 0.003), _run(4096, 3e6, 250.0)]
    assert StepTimeModel(runs).predict(9e6) == (pytest.approx(1 / 0.010), "fit of step time on bytes/step, 1k-4k")
    # KV bytes dearer than the weights' average (a negative intercept): used above the runs only
    steep = StepTimeModel([_run(1024, 1e6, 500.0), _run(2048, 2e6, 200.0), _run(4096, 3e6, 125.0)])
    assert steep.predict(4e6)[0] == pytest.approx(1 / 0.011)
    assert steep.predict(0.5e6) == (pytest.approx(1000.0), "bytes/step scaled from 1k")
    noisy = StepTimeModel([_run(1024, 1e6, 100.0), _run(2048, 2e6, 150.0), _run(4096, 3e6, 200.0)])
    assert noisy.predict(6e6) == (pytest.approx(100.0), "bytes/step scaled from 4k")  # slope < 0: proportional


def test_a_context_past_the_models_limit_is_predicted_from_the_points_own_run(tmp_path):
    spec = zoo.ModelSpec.from_file(write_tiny_spec(tmp_path))
    frame = zoo.compare(spec, vary={"attention.kind": ["gqa"]}, contexts=["1k"], executor=InlineExecutor(), **TINY_RUN)
    (record,) = frame.attrs["contexts"]
    assert record["decode_source"] == "predicted" and record["decode_basis"] == "bytes/step scaled from 12"
    assert record["decode_tokens_per_s"] < frame["decode_tokens_per_s"][0]  # more bytes per step at 1k than at 12
    assert record["note"] == "beyond max_seq_len 64"


def _row(label, values, index, decode):
    contexts = [
        {"context": c, "memory_bytes": 100, "decode_tokens_per_s": d, "decode_source": "predicted"}
        for c, d in zip((1024, 2048, 4096), decode)
    ]
    return {"point_id": label, "index": index, "label": label, "values": values, "status": "ok", "contexts": contexts}


def test_a_crossover_is_solved_between_two_contexts_not_interpolated():
    rows = [
        _row("attention.kind=gqa", {"attention.kind": "gqa"}, 0, [100, 50, 25]),
        _row("attention.kind=mamba", {"attention.kind": "mamba"}, 1, [70, 70, 70]),
    ]
    frame = context_frame(rows, ["attention.kind"], {"attention.kind": "gqa"})
    assert list(frame["decode_tokens_per_s_vs_baseline"]) == [1, 1, 1, 0.7, 1.4, 2.8]
    (item,) = crossovers(frame, "attention.kind=gqa")
    assert item["measure"] == "decode tokens/s" and item["between"] == [1024, 2048] and item["after"] == "better"
    # hand count: gqa's step time 10 ms at 1k, 20 ms at 2k is the line 10 ms + (c - 1024) x 10 ms / 1024;
    # it reaches mamba's 1/70 s at c = 1024 + (1000/70 - 10) x 102.4 = 1462.857...
    assert item["context"] == pytest.approx(1024 + (1000 / 70 - 10) * 102.4, abs=1e-6)
    assert crossover_lines([item]) == [
        (
            "crossover: attention.kind=mamba overtakes attention.kind=gqa in decode tokens/s at 1,463 tokens "
            "(between 1k and 2k)"
        )
    ]
    even = context_frame(
        [rows[0], _row("x", {"attention.kind": "x"}, 1, [50, 50, 50])], ["attention.kind"], {"attention.kind": "gqa"}
    )
    (item,) = crossovers(even)  # ratios 0.5, 1, 2: equal at 2k
    assert item["context"] == 2048 and item["between"] == [1024, 4096]


def test_no_crossover_among_the_contexts_is_said():
    rows = [
        _row("attention.kind=gqa", {"attention.kind": "gqa"}, 0, [100, 50, 25]),
        _row("attention.kind=slow", {"attention.kind": "slow"}, 1, [10, 10, 10]),
    ]
    (item,) = crossovers(context_frame(rows, ["attention.kind"], {"attention.kind": "gqa"}), "attention.kind=gqa")
    assert item["context"] is None and item["after"] == "worse" and item["between"] == [1024, 4096]
    assert crossover_lines([item]) == [
        (
            "no crossover: attention.kind=slow is worse than attention.kind=gqa in "
            "decode tokens/s at every context from 1k to 4k"
        )
    ]


def test_a_sweep_file_with_contexts_saves_the_tables_and_both_plots(tmp_path):
    write_tiny_spec(tmp_path)
    path = tmp_path / "ctx.toml"
    path.write_text(
        textwrap.dedent("""\
        spec_file = "tiny.yaml"
        analysis_only = true
        contexts = ["16", 32, "1k"]
        [vary]
        attention = [{ kind = "gqa" }, { kind = "mamba", d_state = 4 }]
        """)
    )
    frame = zoo.sweep(path, results_dir=tmp_path / "r")
    assert len(frame.attrs["contexts"]) == 6
    for name in ("ctx-contexts.csv", "ctx-contexts.md", "ctx-memory-context.png", "ctx-decode-context.png"):
        data = (tmp_path / "r" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" if name.endswith(".png") else b"context" in data
    assert b"predicted" in (tmp_path / "r" / "ctx-contexts.md").read_bytes()


def test_sweep_contexts_replace_the_files(tmp_path):
    write_tiny_spec(tmp_path)
    path = tmp_path / "plain.toml"
    path.write_text('spec_file = "tiny.yaml"\nanalysis_only = true\n[vary]\nseed = [0]\n')
    assert "contexts" not in zoo.sweep(path, results_dir=tmp_path / "a").attrs
    frame = zoo.sweep(path, results_dir=tmp_path / "b", contexts="32,16", measure_up_to="1k")
    assert [r["context"] for r in frame.attrs["contexts"]] == [16, 32]
    assert pd.concat([frame, frame]).attrs["contexts"] == frame.attrs["contexts"]  # plain records: comparable
    with pytest.raises(BenchError, match="^measure_up_to: 'x' is not a context length"):
        zoo.sweep(path, results_dir=tmp_path / "c", contexts="16", measure_up_to="x")


def test_a_bad_context_in_a_sweep_file_names_the_file_and_key(tmp_path):
    write_tiny_spec(tmp_path)
    path = tmp_path / "bad.toml"
    path.write_text('spec_file = "tiny.yaml"\ncontexts = ["4x"]\n[vary]\nseed = [0]\n')
    with pytest.raises(BenchError, match=r"bad\.toml: contexts: '4x' is not a context length"):
        zoo.sweep(path, results_dir=tmp_path)


def test_a_context_whose_run_is_refused_is_noted_and_predicted(tmp_path):
    from zoo.harness.contexts import context_curve
    from zoo.harness.run_config import make_config
    from zoo.harness.sweep.points import analyse

    spec = zoo.ModelSpec.from_file(write_tiny_spec(tmp_path))
    plan = SweepPlan(spec=spec.to_dict(), vary={"seed": [0]}, contexts=[8, 16], measure_up_to=16)
    config = make_config(**TINY_RUN)

    def measure(measured, run):  # type: ignore[no-untyped-def]
        if run.prompt_len + run.gen_len == 16:
            raise BenchError("needs 9 GiB, 1 GiB free")
        return {
            **_run(8, 1e6, 100.0),
            "environment": {"device": "cpu"},
            "prefill_tokens_per_s": 1.0,
            "decode_peak_bytes": 1,
        }

    records = context_curve(plan, spec, config, analyse(spec, config), measure, spec, None)
    assert [r["decode_source"] for r in records] == ["measured", "predicted"]
    assert records[1]["note"] == "not measured: needs 9 GiB, 1 GiB free"
    assert records[1]["decode_basis"] == "bytes/step scaled from 8"

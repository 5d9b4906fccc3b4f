"""One run on the CPU (tiny archs) and the CUDA path (gpu-marked): the row's fields against
hand counts, the phases found by registration, latency percentiles. The harness's decode
rate against an independent loop is a timing, so it lives in bench/test_decode_agreement.py."""

from __future__ import annotations

import sys
import textwrap
from dataclasses import replace

import numpy as np
import pytest
import torch

import zoo
from tests.conftest import tiny_spec
from zoo.analysis import host_probe
from zoo.analysis.counts import weight_bytes_read
from zoo.components import onednn, row_product
from zoo.errors import BenchError
from zoo.harness import run as zoo_run
from zoo.harness.phases import decode as decode_phase
from zoo.harness.phases.base import PHASES, Phase
from zoo.harness.phases.stats import percentile
from zoo.harness.row import Row
from zoo.harness.run import bench, measure_in_subprocess
from zoo.harness.run_config import BenchConfig

SMALL = {"prompt_len": 16, "gen_len": 6, "repeats": 2, "device": "cpu"}


def test_a_cpu_run_fills_the_row():
    spec = tiny_spec("qwen3-0.6b")  # 2 layers, 2 K/V heads of 16, float32 on the CPU
    m = zoo.bench(spec, predict="h100-sxm", **SMALL)
    assert isinstance(m, zoo.Row) and m.topology == "decoder" and m.phases == ["prefill", "decode"]
    model = zoo.build(spec, device="cpu")
    unique = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    assert m.params_total == unique and m.weight_bytes == unique * 4
    assert m.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4  # layers x (K, V) x heads x head_dim x fp32
    assert m.kv_bytes == 22 * m.kv_bytes_per_token and m.context_len == 16 + 6
    assert m.prefill_peak_bytes > m.weight_bytes and m.peak_bytes == max(m.prefill_peak_bytes, m.decode_peak_bytes)
    assert m.decode_tokens_per_s_min <= m.decode_tokens_per_s <= m.decode_tokens_per_s_max
    assert len(m.decode_tokens_per_s_runs) == 2
    assert m.ttft_min_s <= m.time_to_first_token_s <= m.ttft_max_s and m.prefill_tokens_per_s > 0
    assert m.encoder_tokens_per_s is None and m.cross_kv_bytes is None  # no encoder: None, not 0
    env = m.environment
    assert env.device == "cpu" and env.dtype == "float32" and env.compile_mode == "none"
    assert env.sdpa_backend and env.threads >= 1 and env.torch_version == torch.__version__
    assert m.predicted_gpu == "h100-sxm" and m.predicted_decode_tokens_per_s > 0
    assert m.predicted_bound.startswith("prefill: ") and ", decode: " in m.predicted_bound
    assert (
        m.roofline_source.startswith("measured host (") and m.decode_roofline_fraction > 0
    )  # the fixed peaks of tests/conftest.py
    assert Row.model_validate_json(m.model_dump_json()) == m


def test_inter_token_latency_percentiles_rest_on_every_timed_step(monkeypatch):
    recorded: list[float] = []
    real = decode_phase.StepClock.seconds

    def keep(self):  # type: ignore[no-untyped-def]
        out = real(self)
        recorded.extend(out)
        return out

    monkeypatch.setattr(decode_phase.StepClock, "seconds", keep)
    m = bench(tiny_spec("gpt2"), **{**SMALL, "repeats": 3})
    assert m.itl_steps == len(recorded) == (6 - 1) * 3
    for q in (50, 90, 99):
        assert getattr(m, f"itl_p{q}_s") == pytest.approx(float(np.percentile(recorded, q)), rel=1e-12)
    assert sum(recorded) <= sum(5 / r for r in m.decode_tokens_per_s_runs)  # the steps lie within their phases


def test_a_metered_device_reports_joules_per_token_of_each_timed_phase(monkeypatch):
    """The counter is read around the timed rounds, not the build or warm-up: at a constant
    100 W each phase's joules per token is 100 W over its own tokens per second."""
    from tests.harness.test_measure import Watts
    from zoo.harness import run as run_module
    from zoo.harness.measure import HostProbe

    assert bench(tiny_spec("gpt2"), **SMALL).decode_joules_per_token is None  # no counter: None, not 0
    monkeypatch.setattr(run_module, "probe_for", lambda device: HostProbe(device, Watts(100.0)))
    m = bench(tiny_spec("gpt2"), **SMALL)
    assert m.energy_method == "test: constant power"
    low, high = m.decode_tokens_per_s_min, m.decode_tokens_per_s_max
    assert 100.0 / high * 0.95 <= m.decode_joules_per_token <= 100.0 / low * 1.05
    assert m.prefill_joules_per_token == pytest.approx(100.0 / m.prefill_tokens_per_s, rel=0.5)


@pytest.mark.parametrize(
    "values", [[3.0], [1.0, 2.0], [5.0, 1.0, 4.0, 2.0, 3.0], list(np.random.default_rng(0).random(37))]
)
def test_percentile_is_numpys_linear_interpolation(values):
    for q in (0, 1, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12, abs=0)


DUMMY = textwrap.dedent('''
    from zoo.harness.phases.base import Phase

    class Dummy(Phase):
        """Fills a field no other phase of an encoder fills: the encoder's input length."""
        name = "dummy"
        order = 15
        topologies = frozenset({"encoder"})
        fields = ("compile_s",)

        def measure(self, ctx):
            return {"compile_s": float(ctx.shape.encoder_len)}
''')


def test_a_phase_defined_in_any_module_runs_and_fills_its_field(tmp_path, monkeypatch):
    (tmp_path / "zoo_dummy_phase.py").write_text(DUMMY)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        __import__("zoo_dummy_phase")
        m = zoo.bench(tiny_spec("bert-base-uncased"), device="cpu", prompt_len=8, repeats=1)
        assert m.phases == ["encode", "dummy"] and m.compile_s == 8.0
        assert zoo.bench(tiny_spec("gpt2"), **{**SMALL, "repeats": 1}).phases == [
            "prefill",
            "decode",
        ]  # not a decoder's
    finally:
        PHASES.pop("dummy", None)
        sys.modules.pop("zoo_dummy_phase", None)


def test_a_phase_filling_a_field_the_row_lacks_is_refused_when_defined():
    with pytest.raises(TypeError, match="not fields of zoo.harness.row.Row"):
        type(
            "Bad",
            (Phase,),
            {
                "name": "bad",
                "order": 1,
                "topologies": frozenset({"decoder"}),
                "fields": ("no_such_column",),
                "measure": lambda self, ctx: {},
            },
        )
    assert "bad" not in PHASES


def test_a_recurrent_arch_reports_its_state_beside_no_kv():
    spec = tiny_spec("mamba-130m")
    m = zoo.bench(spec, **SMALL)
    assert m.kv_bytes_per_token == 0
    assert m.state_bytes == 2 * (128 * 4 + 128 * 16) * 4  # conv + ssm, 2 layers
    assert m.kv_bytes == m.state_bytes  # the whole cache, at any context


def test_windowed_moe_arch_with_sinks_runs():
    m = bench(tiny_spec("gpt-oss-20b"), batch_size=2, **SMALL)
    assert m.kv_bytes == zoo.kv_cache_bytes(tiny_spec("gpt-oss-20b"), 2, 22, dtype="float32")
    assert m.environment.sdpa_backend == "none"  # sinks attend with an explicit softmax


def test_run_in_a_fresh_process_returns_the_row():
    spec = tiny_spec("gpt2")
    m = measure_in_subprocess(spec, BenchConfig(**{**SMALL, "repeats": 1}))
    assert m.arch == spec.name and m.kv_bytes == 22 * 2 * 2 * 64 * 4  # 22 tokens x 2 layers x (K, V) x d 64 x fp32


def test_errors_in_the_fresh_process_come_back_as_bench_errors():
    with pytest.raises(BenchError, match="max_seq_len=64"):
        measure_in_subprocess(tiny_spec("gpt2"), BenchConfig(prompt_len=60, gen_len=10, device="cpu"))


@pytest.mark.parametrize(
    "options,message",
    [
        ({"prompt_len": 60, "gen_len": 10}, "exceeds max_seq_len=64"),
        ({"device": "cuda:7" if torch.cuda.is_available() else "cuda"}, "device:"),
        ({"device": "tpu"}, "device:"),
        ({"gen_len": 1}, "gen_len"),
        ({"predict": "h1000"}, "unknown GPU 'h1000'"),
        ({"weights": "./nowhere", "prompt_len": 8, "gen_len": 4}, "nowhere: no such folder"),
    ],
)
def test_bad_runs_raise_bench_errors(options, message):
    with pytest.raises(zoo.errors.ZooError, match=message):
        bench(tiny_spec("gpt2"), **options)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_path_times_with_events_and_resets_peaks():
    spec = tiny_spec("qwen3-0.6b")
    m = bench(spec, device="cuda", prompt_len=16, gen_len=8, predict="h100-sxm", compile=False)
    assert m.environment.device.startswith("cuda") and m.environment.dtype == "bfloat16"
    assert "max_memory_allocated" in m.memory_method
    assert m.kv_bytes == 24 * 2 * 2 * 2 * 16 * 2  # 24 tokens x layers x (K, V) x heads x head_dim x bf16
    assert m.weight_bytes <= m.prefill_peak_bytes < m.weight_bytes + 64 * 2**20
    assert m.decode_tokens_per_s > 0 and m.environment.sdpa_backend != "none"
    assert m.itl_steps == 7 * 2 and 0 < m.itl_p50_s <= m.itl_p90_s <= m.itl_p99_s
    if m.roofline_source is not None:  # a board of the table: fractions of its spec sheet
        assert 0 < m.decode_roofline_fraction < 1 and 0 < m.prefill_roofline_fraction < 1
    compiled = bench(spec, device="cuda", prompt_len=16, gen_len=8, compile=True)
    assert compiled.environment.compile_mode == "reduce-overhead + coordinate_descent_tuning"
    assert compiled.decode_tokens_per_s > 0 and compiled.compile_s > 0


@pytest.mark.parametrize("name", ["gpt2", "t5-small"])
@pytest.mark.parametrize("measured", [True, False])
def test_a_run_fetches_weights_past_the_cache_only_where_a_step_outgrows_it(name, measured, monkeypatch):
    """``host_paths``: the row kernel fetches weights past the caches while a run's phases run
    only where the weights a decode step reads are over twice the last-level cache (an
    encoder-decoder's encoder, never read by a step, not counted) and the host probe measured
    that fetch faster in their dtype, and not off the CPU."""
    model = zoo.build(tiny_spec(name), device="cpu", dtype="float32", seed=0)
    step_bytes = weight_bytes_read(model, 1, torch.float32)
    held = sum(p.nbytes for p in model.parameters())
    assert held > step_bytes if model.encoder is not None else held == step_bytes  # t5's encoder held, not read
    host = host_probe.host_peaks()
    monkeypatch.setattr(host_probe, "host_peaks", lambda: replace(host, past_cache_faster={"float32": measured}))
    cpu = torch.device("cpu")
    for cache, past in ((step_bytes // 2 - 1, measured), (step_bytes // 2 + 1, False)):
        monkeypatch.setattr(host_probe, "last_level_cache_bytes", lambda cache=cache: cache)
        with zoo_run.host_paths(cpu, model):
            assert row_product.PastCache.on is past
        with zoo_run.host_paths(torch.device("meta"), model):
            assert not row_product.PastCache.on
        assert not row_product.PastCache.on
        assert not row_product.PastCache.on


@pytest.mark.parametrize("measured", [True, False])
def test_a_runs_several_row_products_go_through_onednn_only_where_the_probe_measured_it_faster(measured, monkeypatch):
    """``host_paths``: several-row CPU products in a dtype whose oneDNN linear the host probe
    measured faster than torch's matmul go through it while a run's phases run, and not off the
    CPU, nor after."""
    model = zoo.build(tiny_spec("gpt2"), device="cpu", dtype="float32", seed=0)
    host = host_probe.host_peaks()
    monkeypatch.setattr(zoo_run, "host_peaks", lambda: replace(host, onednn_faster={"float32": measured}))
    rows, weight = torch.randn(4, 8), torch.randn(16, 8)
    with torch.no_grad():
        with zoo_run.host_paths(torch.device("cpu"), model):
            assert onednn.takes(rows, weight) is measured
        with zoo_run.host_paths(torch.device("meta"), model):
            assert not onednn.takes(rows, weight)
        assert not onednn.takes(rows, weight)

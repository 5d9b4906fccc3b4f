"""One run on the CPU (tiny archs) and the CUDA path (gpu-marked). The harness's decode rate
against an independent loop is a timing, so it lives in bench/test_decode_agreement.py."""

from __future__ import annotations

import pytest
import torch

import zoo
from tests.conftest import tiny_spec
from zoo.errors import BenchError
from zoo.harness.run import BenchConfig, Measurement, bench, run_in_subprocess

SMALL = {"prompt_len": 16, "gen_len": 6, "repeats": 2, "device": "cpu"}


def test_a_cpu_run_measures_every_field():
    spec = tiny_spec("qwen3-0.6b")
    m = zoo.bench(spec, predict="h100-sxm", **SMALL)
    assert isinstance(m, zoo.Measurement)
    count = zoo.count_params(spec)
    assert (m.params_total, m.params_active, m.params_embedding) == (count.total, count.active, count.embedding)
    assert m.weight_bytes == count.total * 4  # float32 on the CPU by default
    assert m.kv_bytes == zoo.kv_cache_bytes(spec, 1, 16 + 6, dtype="float32")
    assert m.kv_bytes_per_token == zoo.kv_bytes_per_token(spec, dtype="float32")
    assert m.context_len == 22
    assert m.prefill_peak_bytes > m.weight_bytes and m.decode_peak_bytes > m.weight_bytes
    assert m.decode_tokens_per_s_min <= m.decode_tokens_per_s <= m.decode_tokens_per_s_max
    assert len(m.decode_tokens_per_s_runs) == 2
    assert m.time_to_first_token_s > 0 and m.prefill_tokens_per_s > 0
    assert m.flops_per_token == zoo.flops_per_token(spec, 16 + 3)
    env = m.environment
    assert env.device == "cpu" and env.dtype == "float32" and env.compile_mode == "none"
    assert env.sdpa_backend and env.threads >= 1 and env.torch_version == torch.__version__
    assert m.predicted_gpu == "h100-sxm" and m.predicted_decode_tokens_per_s > 0
    assert m.decode_roofline_fraction is None  # not measured on an H100
    assert Measurement.model_validate_json(m.model_dump_json()) == m


def test_a_recurrent_arch_reports_its_state_beside_no_kv():
    spec = tiny_spec("mamba-130m")
    m = zoo.bench(spec, **SMALL)
    assert m.kv_bytes_per_token == 0
    assert m.state_bytes == zoo.state_bytes(spec, dtype="float32") == 2 * (128 * 4 + 128 * 16) * 4  # conv + ssm, 2 layers
    assert m.kv_bytes == m.state_bytes  # the whole cache, at any context
    assert m.flops_per_token == zoo.flops_per_token(spec, 16 + 3) == zoo.flops_per_token(spec, 1000)


def test_windowed_moe_arch_with_sinks_runs():
    m = bench(tiny_spec("gpt-oss-20b"), batch_size=2, **SMALL)
    assert m.kv_bytes == zoo.kv_cache_bytes(tiny_spec("gpt-oss-20b"), 2, 22, dtype="float32")
    assert m.environment.sdpa_backend == "none"  # sinks attend with an explicit softmax


def test_run_in_a_fresh_process_returns_the_measurement():
    spec = tiny_spec("gpt2")
    m = run_in_subprocess(spec, BenchConfig(**{**SMALL, "repeats": 1}))
    assert m.arch == spec.name and m.kv_bytes == zoo.kv_cache_bytes(spec, 1, 22, dtype="float32")


def test_errors_in_the_fresh_process_come_back_as_bench_errors():
    with pytest.raises(BenchError, match="max_seq_len=64"):
        run_in_subprocess(tiny_spec("gpt2"), BenchConfig(prompt_len=60, gen_len=10, device="cpu"))


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
    assert m.kv_bytes == zoo.kv_cache_bytes(spec, 1, 24, dtype="bfloat16")
    assert m.weight_bytes <= m.prefill_peak_bytes < m.weight_bytes + 64 * 2**20
    assert m.decode_tokens_per_s > 0 and m.environment.sdpa_backend != "none"
    compiled = bench(spec, device="cuda", prompt_len=16, gen_len=8, compile=True)
    assert compiled.environment.compile_mode == "reduce-overhead + coordinate_descent_tuning"
    assert compiled.decode_tokens_per_s > 0 and compiled.compile_s > 0



"""zoo.harness.phases.compiling: what a run's ``compile`` option does (fused projections, both
steps compiled, CUDA options, compile time). Compiled here with aot_eager: capture in
seconds; inductor itself is exercised by the slow and GPU tests."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch._inductor.config as inductor_config

import zoo
from tests.conftest import tiny_spec
from zoo.components.fused import FUSED_SIZES
from zoo.harness.phases import compiling
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill


@pytest.fixture
def aot_eager(monkeypatch):
    monkeypatch.setattr(compiling, "compile_options", lambda device: ({"backend": "aot_eager"}, "aot_eager"))
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_cuda_options_are_cuda_graphs_with_coordinate_descent_tuning():
    options, mode = compiling.compile_options(torch.device("cuda"))
    assert options == {"options": {"triton.cudagraphs": True, "coordinate_descent_tuning": True}}
    assert "coordinate_descent_tuning" in mode
    assert isinstance(inductor_config.coordinate_descent_tuning, bool)  # a real inductor setting
    assert isinstance(inductor_config.triton.cudagraphs, bool)
    torch.compile(lambda x: x, **options)  # inductor checks option names when the wrapper is made
    assert compiling.compile_options(torch.device("cpu")) == ({"mode": "default"}, "default")


def test_eager_steps_are_the_plain_functions_over_fused_projections():
    model = zoo.build(tiny_spec("llama-3.2-1b"), seed=0).eval()
    steps = compiling.run_steps(model, torch.device("cpu"), compiled=False)
    assert steps.prefill is prefill and steps.decode is decode_step and steps.compile_s is None
    assert any(hasattr(m, FUSED_SIZES) for m in model.modules())


def test_compiled_steps_fuse_and_agree_with_eager(aot_eager):
    spec = tiny_spec("qwen3-0.6b")
    plain, model = (zoo.build(spec, seed=1).eval() for _ in range(2))
    steps = compiling.run_steps(model, torch.device("cpu"), compiled=True)
    assert any(hasattr(m, FUSED_SIZES) for m in model.modules())
    ids = torch.randint(0, 97, (1, 6))
    caches = KVCache(plain, 1, 10), KVCache(model, 1, 10)
    expected, got = prefill(plain, ids, caches[0]), steps.prefill(model, ids, caches[1])
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    token = expected.argmax(-1, keepdim=True)  # (1, 1)
    torch.testing.assert_close(
        steps.decode(model, token, caches[1]), decode_step(plain, token, caches[0]), atol=1e-5, rtol=0
    )
    assert len(steps.first_calls_s) == 2 and steps.compile_s == sum(steps.first_calls_s) > 0


def test_a_compiled_run_reports_its_compile_time(aot_eager):
    m = zoo.bench(tiny_spec("llama-3.2-1b"), prompt_len=8, gen_len=3, repeats=1, compile=True)
    assert m.environment.compile_mode == "aot_eager" and m.compile_s is not None and m.compile_s > 0
    assert zoo.bench(tiny_spec("llama-3.2-1b"), prompt_len=8, gen_len=3, repeats=1).compile_s is None

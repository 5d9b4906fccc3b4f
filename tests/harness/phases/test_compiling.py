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


def test_cuda_options_are_cuda_graphs_with_coordinate_descent_tuning_and_the_cpu_a_cpp_wrapper():
    options, mode = compiling.compile_options(torch.device("cuda"))
    assert options == {"options": {"triton.cudagraphs": True, "coordinate_descent_tuning": True}}
    assert "coordinate_descent_tuning" in mode
    assert isinstance(inductor_config.coordinate_descent_tuning, bool)  # a real inductor setting
    assert isinstance(inductor_config.triton.cudagraphs, bool)
    torch.compile(lambda x: x, **options)  # inductor checks option names when the wrapper is made
    cpu, mode = compiling.compile_options(torch.device("cpu"))
    assert cpu == {"options": {"cpp_wrapper": True}} and mode == "default + cpp_wrapper"
    assert isinstance(inductor_config.cpp_wrapper, bool)
    torch.compile(lambda x: x, **cpu)


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


def _skips_guards() -> bool:
    from torch._dynamo.eval_frame import _is_skip_guard_eval_unsafe_stance

    return _is_skip_guard_eval_unsafe_stance()


def test_a_compiled_run_skips_the_guards_of_warm_graphs_only_once_settled(aot_eager):
    """The settling warm-up round recompiled nothing, so the timed calls skip dynamo's guards;
    an eager run has none to skip."""
    seen: list[bool] = []
    real = compiling.RunSteps.steady

    def steady(self):
        seen.append(self.settled is True)
        return real(self)

    compiled = zoo.bench(tiny_spec("llama-3.2-1b"), prompt_len=8, gen_len=3, repeats=2, compile=True)
    assert compiled.environment.compile_guards == "skipped once warm"
    eager = zoo.bench(tiny_spec("llama-3.2-1b"), prompt_len=8, gen_len=3, repeats=1)
    assert eager.environment.compile_guards == "none"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiling.RunSteps, "steady", steady)
        zoo.bench(tiny_spec("t5-small"), prompt_len=8, gen_len=3, repeats=1, compile=True)
    assert seen and all(seen)  # the prefill's and the decode's timed calls


def test_a_recompile_while_settling_keeps_the_guards(aot_eager):
    steps = compiling.RunSteps(prefill, decode_step, "aot_eager")
    double = torch.compile(lambda x: x * 2, backend="aot_eager", dynamic=False)
    double(torch.ones(3))
    steps.settle(lambda: double(torch.ones(3)))
    assert steps.settled and steps.guards == "skipped once warm"
    with steps.steady():
        assert _skips_guards()
    assert not _skips_guards()
    steps.settle(lambda: double(torch.ones(4)))  # a new shape: dynamo would compile again
    assert steps.settled is False and steps.guards == "checked"
    with steps.steady():
        assert not _skips_guards()
    steps.settle(lambda: double(torch.ones(3)))  # a later clean round does not undo it
    assert steps.settled is False
    eager = compiling.RunSteps(prefill, decode_step)
    eager.settle(lambda: None)
    assert eager.guards == "none" and eager.settled is None

"""``CompiledGraph``: under dynamo's ``skip_guard_eval_unsafe`` stance a function holding one graph
runs that graph's bytecode without dynamo (same outputs, the trace's Python side effects
replayed); with no graph yet, or several, or outside the stance, dynamo decides as always. The
private dynamo functions it reads are pinned here. A compiled decode step under the stance gives
the eager step's logits and advances the cache as the eager step does."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from tests.generation_checks import _one_thread  # noqa: F401 (autouse fixture)
from tests.model.test_generation import VOCAB, grid_model
from zoo.model.cache import KVCache
from zoo.model.compiled import CompiledGraph
from zoo.model.generation import compile_decode_step, decode_step, prefill


class Box:
    """Where the compiled function leaves a Python side effect."""

    last: torch.Tensor | None = None


def doubled_plus_one(box: Box, x: torch.Tensor) -> torch.Tensor:
    box.last = x  # a side effect dynamo records and its bytecode replays after the graph
    return x * 2 + 1


def _no_dynamo(*args: object) -> torch.Tensor:
    raise AssertionError("dynamo was entered")


def test_one_warm_graph_runs_without_dynamo_under_the_stance_only():
    torch._dynamo.reset()
    graph, box = CompiledGraph(doubled_plus_one, backend="aot_eager"), Box()
    assert graph.warm_graph() is None  # nothing compiled yet
    x = torch.arange(4.0)
    assert torch.equal(graph(box, x), x * 2 + 1) and box.last is x  # compiled by dynamo
    assert graph.warm_graph() is not None
    graph._compiled = _no_dynamo
    y = torch.arange(4.0) + 5
    with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
        assert torch.equal(graph(box, y), y * 2 + 1) and box.last is y
    with pytest.raises(AssertionError, match="dynamo was entered"):
        graph(box, y)  # without the stance: dynamo and its guards


def test_several_graphs_leave_the_choice_to_dynamo():
    torch._dynamo.reset()
    graph, box = CompiledGraph(doubled_plus_one, backend="aot_eager", dynamic=False), Box()
    graph(box, torch.arange(4.0))
    graph(box, torch.arange(6.0))  # another shape: a second graph
    assert graph.warm_graph() is None
    with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
        x = torch.arange(6.0)
        assert torch.equal(graph(box, x), x * 2 + 1) and box.last is x


def test_a_warm_compiled_decode_step_under_the_stance_equals_the_eager_step(monkeypatch: pytest.MonkeyPatch):
    torch._dynamo.reset()
    direct_calls = []
    warm_graph = CompiledGraph.warm_graph

    def counted(self: CompiledGraph) -> object:
        found = warm_graph(self)
        direct_calls.append(found is not None)
        return found

    monkeypatch.setattr(CompiledGraph, "warm_graph", counted)
    model = grid_model("gqa", None, False, True, "rope", "swiglu")
    ids = torch.randint(0, VOCAB, (1, 5))
    step = compile_decode_step(backend="aot_eager")
    eager_cache, cache = KVCache(model, 1, 16), KVCache(model, 1, 16)
    expected, got = [prefill(model, ids, eager_cache)], [prefill(model, ids, cache)]
    for i in range(5):
        token = expected[-1].argmax(-1, keepdim=True)  # (B, 1)
        expected.append(decode_step(model, token, eager_cache))
        with torch.compiler.set_stance(skip_guard_eval_unsafe=i > 0):  # the first step compiles
            got.append(step(model, token, cache))
        assert cache.length == eager_cache.length
    torch.testing.assert_close(torch.stack(got, 1), torch.stack(expected, 1), atol=1e-5, rtol=1e-5)
    assert direct_calls == [True] * 4  # every step after the first ran its graph without dynamo


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_graph_decode_step_replays_without_dynamo_under_the_stance():
    """The harness's CUDA options (inductor's CUDA graph trees): recorded while dynamo runs the
    step, then replayed with each call a new generation, equal to the eager step."""
    import torch._inductor.config as inductor_config

    from zoo.harness.phases.compiling import CUDA_INDUCTOR_OPTIONS

    torch._dynamo.reset()
    model = grid_model("gqa", None, False, True, "rope", "swiglu").to("cuda")
    ids = torch.randint(0, VOCAB, (1, 5), device="cuda")
    step = compile_decode_step(options=dict(CUDA_INDUCTOR_OPTIONS))
    eager_cache, cache = KVCache(model, 1, 24), KVCache(model, 1, 24)
    token = prefill(model, ids, eager_cache).argmax(-1, keepdim=True)  # (B, 1)
    prefill(model, ids, cache)
    with inductor_config.patch(**{"triton.cudagraph_or_error": True}):
        for i in range(8):  # warm-up and recording through dynamo, then replays without it
            expected = decode_step(model, token, eager_cache)
            with torch.compiler.set_stance(skip_guard_eval_unsafe=i > 2):
                got = step(model, token, cache).clone()
            torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
            token = expected.argmax(-1, keepdim=True)
    assert int(cache.position) == int(eager_cache.position) == 5 + 8

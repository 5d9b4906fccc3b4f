"""The decode step compiles whole (fullgraph) on the CPU and is reused across steps."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from tests.generation_checks import _one_thread, check_compiled_decode  # noqa: F401 (autouse fixture)
from tests.model.test_generation import VOCAB, grid_model, mixer_model
from zoo.errors import GenerationError
from zoo.harness.phases.compiling import compile_options
from zoo.model.cache import KVCache
from zoo.model.generation import compile_decode_step, decode_step, left_pad, prefill

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize(
    ("backend", "device"),
    [
        ("aot_eager", "cpu"),
        pytest.param("inductor", "cpu", marks=pytest.mark.slow),
        pytest.param("inductor", "cuda", marks=[pytest.mark.gpu, CUDA]),
    ],
)
def test_compiled_decode_step_equals_eager_without_recompiling(backend, device):
    """aot_eager checks capture and functionalised cache writes in seconds; inductor (the
    real backend, 20-80 s of C++ compilation on a cold CPU cache) checks the kernels too,
    on the CPU with the options ``zoo bench --compile`` gives it there (its C++ wrapper)."""
    # window, sinks, QK-norm, RoPE and a MoE whose 3 rows x top-2 > 4 experts (dense path)
    model = grid_model("gqa", 4, True, True, "rope", "moe").to(device)
    prompts = [[5, 9, 2, 7, 7, 1], [11, 4], [8, 8, 20, 3]]
    options = compile_options(torch.device("cpu"))[0] if backend == "inductor" and device == "cpu" else None
    step, token, eager_cache, compiled_cache = check_compiled_decode(
        model, prompts, 8, backend=backend, device=device, compile_options=options
    )  # past the window of 4
    assert compiled_cache.length == eager_cache.length == 6 + 8
    assert int(compiled_cache.position) == 14
    with pytest.raises(GenerationError, match="max_len=16"):  # the bounds check stays outside the graph
        for _ in range(3):
            step(model, token, compiled_cache)


@pytest.mark.parametrize("name", ["mamba", "mamba-then-gqa", "linear-rope"])
def test_compiled_recurrent_decode_step_equals_eager_without_recompiling(name):
    """The recurrent state (conv window and SSM state) is updated in place inside the
    graph, from a left-padded prefill, and the step compiles once."""
    _, _, eager_cache, compiled_cache = check_compiled_decode(
        mixer_model(name), [[5, 9, 2, 7, 7, 1], [11, 4], [8, 8, 20, 3]], 6
    )
    for eager_tensors, compiled_tensors in zip(eager_cache.layers, compiled_cache.layers):
        for key in eager_tensors:
            torch.testing.assert_close(compiled_tensors[key], eager_tensors[key], atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
@CUDA
def test_reduce_overhead_captures_the_decode_step_in_a_cuda_graph():
    """The cache tensors and write position are mutated in place by the step; marked as
    static addresses (zoo/model/cache.py) they let inductor record a CUDA graph instead of
    skipping it. cudagraph_or_error turns any skip into an error; no graph breaks
    (fullgraph); a recorded graph exists in the cudagraph tree; results equal eager."""
    import torch._inductor.config as inductor_config
    from torch._dynamo.utils import counters
    from torch._inductor import cudagraph_trees

    model = grid_model("gqa", None, False, True, "rope", "swiglu").to("cuda")
    ids = torch.randint(0, VOCAB, (2, 5), device="cuda")
    eager_cache, graph_cache = KVCache(model, 2, 24), KVCache(model, 2, 24)
    eager = prefill(model, ids, eager_cache)
    prefill(model, ids, graph_cache)
    torch._dynamo.reset()
    counters.clear()
    step = compile_decode_step(mode="reduce-overhead")
    token = eager.argmax(-1, keepdim=True)  # (B, 1)
    with inductor_config.patch(**{"triton.cudagraph_or_error": True}):
        for _ in range(6):  # warm-up, record, then replays
            eager = decode_step(model, token, eager_cache)
            compiled = step(model, token, graph_cache).clone()
            torch.testing.assert_close(compiled, eager, atol=1e-4, rtol=1e-4)
            token = eager.argmax(-1, keepdim=True)
    assert counters["inductor"]["cudagraph_skips"] == 0
    assert not counters["graph_break"]
    manager = cudagraph_trees.get_manager(torch.cuda.current_device(), create_if_none_exists=False)
    assert manager is not None and any(manager.roots.values()), "no CUDA graph was recorded"
    assert int(graph_cache.position) == 5 + 6


def test_compiled_encoder_decoder_and_recurrent_decode_steps_do_not_recompile():
    """Cross-attention reading the memory K/V, and a recurrent mixer reading its
    per-sequence state with token_valid, capture whole (aot_eager) and are reused."""
    import zoo
    from tests.model.test_state import Plugin
    from zoo.specs.registry import reset_registry

    tiny = {
        "vocab_size": VOCAB,
        "d_model": 32,
        "n_layers": 2,
        "ffn.hidden": 64,
        "encoder": {"n_layers": 1},
        "attention.n_heads": 4,
        "attention.n_kv_heads": 4,
        "attention.head_dim": 8,
        "cross_attention.n_heads": 4,
        "cross_attention.n_kv_heads": 4,
        "cross_attention.head_dim": 8,
    }
    seq2seq = zoo.build(zoo.spec("transformer-base").override(tiny), seed=0).eval()
    zoo.register_plugin(Plugin(), name="runsum-plugin")
    try:
        hybrid = zoo.build(
            zoo.spec("gpt2").override(
                {
                    "n_layers": 2,
                    "d_model": 32,
                    "vocab_size": VOCAB,
                    "attention.n_heads": 2,
                    "attention.n_kv_heads": 2,
                    "layers": {"0": {"attention": {"kind": "runsum"}}},
                }
            ),
            seed=0,
        )
        ids, mask = left_pad([[5, 9, 2], [11, 4, 6, 1]])
        memory = seq2seq.encode(ids, mask)
        for model, extra in ((seq2seq, {"memory": memory}), (hybrid, {"attention_mask": mask})):
            prompt = ids[:, :1] if model is seq2seq else ids
            caches = [KVCache(model, 2, 12, memory_len=4 if model is seq2seq else 0) for _ in range(2)]
            eager = prefill(model, prompt, caches[0], **extra)
            prefill(model, prompt, caches[1], **extra)
            torch._dynamo.reset()
            step = compile_decode_step(backend="aot_eager")
            token = eager.argmax(-1, keepdim=True)  # (B, 1)
            for i in range(4):
                eager = decode_step(model, token, caches[0])
                with torch._dynamo.config.patch(error_on_recompile=i > 0):
                    compiled = step(model, token, caches[1])
                torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)
                token = eager.argmax(-1, keepdim=True)
    finally:
        reset_registry()


def test_compiled_prefill_equals_eager_and_reuses_its_graph():
    """compile_prefill (aot_eager: capture and functionalised cache writes) gives the eager
    logits, leaves the cache as eager prefill does (the decode steps after it agree), and a
    second prompt of the same shape reuses the graph."""
    from zoo.model.generation import compile_prefill

    model = grid_model("gqa", 4, True, True, "rope", "moe")
    ids = torch.tensor([[5, 9, 2, 7, 7, 1], [11, 4, 3, 3, 8, 1]])
    eager_cache, compiled_cache = KVCache(model, 2, 12), KVCache(model, 2, 12)
    torch._dynamo.reset()
    run = compile_prefill(backend="aot_eager")
    for round_index in range(2):
        eager_cache.reset()
        compiled_cache.reset()
        eager = prefill(model, ids, eager_cache)
        with torch._dynamo.config.patch(error_on_recompile=round_index > 0):
            compiled = run(model, ids, compiled_cache)
        torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)
        assert compiled_cache.length == eager_cache.length == 6 and int(compiled_cache.position) == 6
        token = eager.argmax(-1, keepdim=True)  # (B, 1)
        for _ in range(5):  # past the window of 4: the ring the compiled prefill wrote
            a, b = decode_step(model, token, eager_cache), decode_step(model, token, compiled_cache)
            torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
            token = a.argmax(-1, keepdim=True)
    with pytest.raises(GenerationError, match="max_len=12"):  # bounds checked outside the graph
        run(model, torch.ones(2, 4, dtype=torch.long), compiled_cache)


def test_one_compiled_step_serves_two_models_each_with_its_own_graph():
    """Guards on modules are skipped (``compile_decode_step``) and each model is bound to a
    graph of its own: two models of different depth through one step function each decode as
    their eager step does."""
    step = compile_decode_step(backend="aot_eager")
    ids = torch.tensor([[5, 9, 2, 7]])  # (1, T)
    for model in (grid_model("gqa", 4, True, True, "rope", "moe"), mixer_model("mamba")):
        caches = [KVCache(model, batch_size=1, max_len=8) for _ in range(2)]
        with torch.no_grad():
            tokens = [prefill(model, ids, cache).argmax(-1, keepdim=True) for cache in caches]  # (1, 1) each
            for _ in range(3):
                expected = decode_step(model, tokens[0], caches[0])  # (1, V)
                got = step(model, tokens[1], caches[1])
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
                tokens = [expected.argmax(-1, keepdim=True)] * 2

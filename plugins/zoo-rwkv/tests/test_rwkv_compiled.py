"""zoo-rwkv's C++ kernels are custom ops (``zoo.parts.CppExtension``): a compiled prefill and
decode step (``zoo.model.generation``) call them inside the graph and give the eager
reference's logits and tokens (1e-5, float32); each op passes ``torch.library.opcheck``."""

from __future__ import annotations

import pytest
import torch
from rwkv_helpers import TINY, checkpoint, deterministic  # noqa: F401 (fixtures)
from zoo_rwkv import cpu_step, cpu_wkv

import zoo
from zoo.model.cache import KVCache
from zoo.model.generation import compile_decode_step, compile_prefill, decode_step, prefill

pytest.importorskip("transformers")

C = 16  # channels


def _loaded(folder, impl: str) -> torch.nn.Module:  # type: ignore[no-untyped-def]
    from zoo.components.kernels import preferring  # the harness's --impl, as zoo's own tests set it

    with preferring(impl):
        return zoo.from_pretrained(folder, progress=False).eval()


def test_compiled_steps_run_the_kernels_and_equal_the_eager_reference(checkpoint):
    import torch._dynamo
    from torch._dynamo.backends.registry import lookup_backend

    from zoo.components.kernels import implementations

    reference, fast = _loaded(checkpoint[1], "reference"), _loaded(checkpoint[1], "auto")
    graphs: list[set[str]] = []

    def record(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        graphs.append({str(n.target).removesuffix(".default") for n in gm.graph.nodes if n.op == "call_function"})
        return lookup_backend("aot_eager")(gm, example_inputs)

    torch._dynamo.reset()
    ids = torch.randint(0, TINY["vocab_size"], (2, 7))  # (B, T)
    run_prefill, step = compile_prefill(backend=record), compile_decode_step(backend=record)
    expected_cache, cache = KVCache(reference, 2, 12), KVCache(fast, 2, 12)
    expected, got = [prefill(reference, ids, expected_cache)], [run_prefill(fast, ids, cache)]  # (B, V) each
    for i in range(4):
        token = expected[-1].argmax(-1, keepdim=True)  # (B, 1)
        expected.append(decode_step(reference, token, expected_cache))
        with torch._dynamo.config.patch(error_on_recompile=i > 0):
            got.append(step(fast, token, cache))
    torch.testing.assert_close(torch.stack(got, 1), torch.stack(expected, 1), atol=1e-5, rtol=1e-5)
    assert torch.equal(torch.stack(got, 1).argmax(-1), torch.stack(expected, 1).argmax(-1))
    assert len(graphs) == 2 and "zoo.rwkv_cpu_wkv_wkv_scan" in graphs[0]
    assert {"zoo.rwkv_cpu_step_shift_mix", "zoo.rwkv_cpu_step_wkv_step"} <= graphs[1]
    assert implementations(fast) == "rwkv: cpu-scan+cpu-step, rwkv-ffn: cpu-step"


def _state() -> tuple[torch.Tensor, ...]:
    return torch.randn(2, C), torch.rand(2, C) + 0.1, torch.randn(2, C)  # num, den > 0, max


@pytest.mark.parametrize(
    ("op", "args"),
    [
        ("shift_mix", lambda: (torch.randn(2, C), torch.randn(2, C), [torch.rand(C), torch.rand(C), torch.rand(C)])),
        ("wkv_step", lambda: (-torch.rand(C), torch.randn(C), *(torch.randn(2, C) for _ in range(3)), *_state())),
        (
            "wkv_scan",
            lambda: (
                -torch.rand(C),
                torch.randn(C),
                torch.randn(2, 5, C),
                torch.randn(2, 5, C),
                torch.empty(0),
                *_state(),
            ),
        ),
    ],
)
def test_the_ops_pass_opcheck(op, args):
    extension = cpu_wkv.EXTENSION if op == "wkv_scan" else cpu_step.EXTENSION
    namespace, name = extension.op_name(op).split("::")
    torch.library.opcheck(getattr(getattr(torch.ops, namespace), name).default, args())

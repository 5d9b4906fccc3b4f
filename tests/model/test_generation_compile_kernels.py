"""A compiled prefill and decode step (``zoo.model.generation``'s compiled path) call zoo's C++
CPU kernels inside the graph, as the custom ops of ``zoo.components.cpu_ops``, and give the
eager reference model's logits and tokens (1e-5, float32) and states; the row's
``implementations`` name the kernels. One hybrid model holds every mixer with a CPU kernel,
so one compilation checks them all."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch._dynamo

import zoo
from tests.generation_checks import _one_thread  # noqa: F401 (autouse fixture)
from zoo.components.kernels import implementations, preferring
from zoo.model.cache import KVCache
from zoo.model.generation import compile_decode_step, compile_prefill, decode_step, prefill
from zoo.specs.model import ModelSpec

VOCAB = 53
LAYERS = {  # layer -> a mixer with a CPU kernel (tiny widths)
    "0": {"kind": "mamba", "d_state": 4, "expand": 2},
    "1": {"kind": "mamba2", "n_heads": 4, "head_dim": 8, "n_groups": 2, "state_size": 8},
    "2": {"kind": "gated_deltanet", "n_k_heads": 2, "n_v_heads": 4, "head_k_dim": 8, "head_v_dim": 6},
    "3": {"kind": "linear", "n_heads": 4, "head_dim": 8},
    "4": {"kind": "infini", "n_heads": 4, "segment": 4, "update": "delta"},
}
IMPLEMENTATIONS = (
    "gated_deltanet: cpu-scan+cpu-step, infini: cpu-step, linear: cpu-step, "
    "mamba: cpu-scan+cpu-step, mamba2: cpu-scan+cpu-step"
)
PREFILL_OPS = {"zoo.cpu_scan_scan", "zoo.cpu_prefill_ssd_rows", "zoo.cpu_prefill_delta_rows"}
STEP_OPS = {"zoo.cpu_mamba_step_mamba_step"} | {
    f"zoo.cpu_steps_{n}_step" for n in ("mamba2", "gdn", "linear", "infini")
}


def mixers_with_kernels(impl: str) -> torch.nn.Module:
    spec = ModelSpec.model_validate(
        {
            "name": "compiled-kernels",
            "vocab_size": VOCAB,
            "d_model": 32,
            "n_layers": len(LAYERS),
            "max_seq_len": 32,
            "norm": {"kind": "rmsnorm"},
            "positional": {"kind": "none"},
            "attention": LAYERS["0"],
            "ffn": {"kind": "swiglu", "hidden": 24},
            "block": {"kind": "pre_norm"},
            "layers": {key: {"attention": options} for key, options in LAYERS.items() if key != "0"},
        }
    )
    with preferring(impl):
        return zoo.build(spec, device="cpu", dtype="float32", seed=0).eval()


def _recording(backend: str, graphs: list[set[str]]) -> Callable[..., Callable[..., object]]:
    """``backend`` that first notes the ops of each graph dynamo captured (one set per graph)."""
    from torch._dynamo.backends.registry import lookup_backend

    compiler = lookup_backend(backend)

    def record(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., object]:
        targets = (str(node.target) for node in gm.graph.nodes if node.op == "call_function")
        graphs.append({target.removesuffix(".default") for target in targets})
        return compiler(gm, example_inputs)

    return record


def test_compiled_steps_run_the_cpu_kernels_and_equal_the_eager_reference(backend: str = "aot_eager"):
    """aot_eager checks the capture and the functionalised in-place state updates in seconds
    (inductor, its re-inplacing of them too, takes a minute of C++ compilation here: pass
    ``backend="inductor"`` to run it by hand)."""
    reference, fast = mixers_with_kernels("reference"), mixers_with_kernels("auto")
    ids = torch.randint(0, VOCAB, (2, 9))  # (B, T): unpadded, so the steps may take the kernels
    torch._dynamo.reset()
    graphs: list[set[str]] = []
    run_prefill, step = (
        compile_prefill(backend=_recording(backend, graphs)),
        compile_decode_step(backend=_recording(backend, graphs)),
    )
    expected_cache, cache = KVCache(reference, 2, 16), KVCache(fast, 2, 16)
    expected, got = [prefill(reference, ids, expected_cache)], [run_prefill(fast, ids, cache)]  # (B, V) each
    for i in range(6):  # past infini's segment of 4: its memory is written inside the graph
        token = expected[-1].argmax(-1, keepdim=True)  # (B, 1)
        expected.append(decode_step(reference, token, expected_cache))
        with torch._dynamo.config.patch(error_on_recompile=i > 0):
            got.append(step(fast, token, cache))
    torch.testing.assert_close(torch.stack(got, 1), torch.stack(expected, 1), atol=1e-5, rtol=1e-5)
    assert torch.equal(torch.stack(got, 1).argmax(-1), torch.stack(expected, 1).argmax(-1))
    for want, have in zip(expected_cache.layers, cache.layers, strict=True):
        for name in want:
            torch.testing.assert_close(have[name], want[name], atol=1e-5, rtol=1e-5)
    assert len(graphs) == 2  # the prefill, then the decode step, each compiled once
    assert graphs[0] >= PREFILL_OPS and graphs[1] >= STEP_OPS
    assert implementations(fast) == IMPLEMENTATIONS and implementations(reference) is not None

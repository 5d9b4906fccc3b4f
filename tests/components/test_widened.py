"""zoo.components.widened: several-row half-precision products and the mixers' short
convolutions widened to float32 where a run asks for it (``widened_products``) equal torch's
float32 accumulation rounded once, chunked or not, with gradients, and a recurrent model's
prefill and decode still equal its full forward; a run widens the dtypes the host probe
measured slow."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import zoo
from tests.conftest import SMALL_MAMBA2, TINY_VOCAB, tiny_spec
from zoo.analysis import host_probe
from zoo.components import widened
from zoo.components.kernels import preferring
from zoo.components.linear import Linear
from zoo.components.widened import widened_products
from zoo.harness import run
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("chunk_rows", [None, 7])
def test_a_widened_product_is_f_linears_float32_sum_rounded_once(monkeypatch, dtype, chunk_rows):
    layer = Linear(96, 50).to(dtype)
    x = torch.randn(2, 9, 96).to(dtype)
    if chunk_rows is not None:  # the weight widened 7 rows at a time: 8 chunks, the last short
        monkeypatch.setattr(widened, "WIDEN_CHUNK_BYTES", 4 * 96 * chunk_rows)
    with torch.no_grad(), widened_products([dtype]):
        got = layer(x)
    expected = F.linear(x.float(), layer.weight.float(), layer.bias.float()).to(dtype)
    assert got.shape == (2, 9, 50) and got.dtype == dtype
    torch.testing.assert_close(got, expected, atol=torch.finfo(dtype).eps * 4, rtol=torch.finfo(dtype).eps)


def test_only_the_named_dtypes_and_several_rows_widen(monkeypatch):
    calls: list[tuple[int, ...]] = []
    widen = widened.linear
    monkeypatch.setattr(widened, "linear", lambda x, w, b: calls.append(tuple(x.shape)) or widen(x, w, b))
    layer = Linear(64, 32).bfloat16()
    with torch.no_grad():
        layer(torch.randn(1, 5, 64).bfloat16())  # not asked for: F.linear
        with widened_products([torch.bfloat16]):
            layer(torch.randn(1, 5, 64).bfloat16())
            layer(torch.randn(1, 1, 64).bfloat16())  # one row: the one-row paths
            Linear(64, 32)(torch.randn(1, 5, 64))  # float32: F.linear
    assert calls == [(1, 5, 64)]


@pytest.mark.parametrize("arch", ["mamba-130m", "mamba2-130m"])
def test_a_widened_prefill_of_a_recurrent_model_continues_as_its_full_forward(monkeypatch, arch):
    """The short convolution over a prompt runs widened (torch's half-precision convolution is
    its slow reference here) and the products too: the prompt's logits are the full forward's
    to bfloat16's rounding, and decode steps continue it."""
    calls: list[tuple[int, ...]] = []
    widen = widened.depthwise_conv
    monkeypatch.setattr(widened, "depthwise_conv", lambda x, w, b: calls.append(tuple(x.shape)) or widen(x, w, b))
    spec = tiny_spec(arch) if arch == "mamba-130m" else zoo.spec(arch).override(SMALL_MAMBA2)
    with preferring("reference"):  # torch's convolution: cpu-scan's prompt convolution is its own C++ pass
        model = zoo.build(spec, dtype="bfloat16", seed=0).eval()
    ids = torch.randint(0, TINY_VOCAB, (1, 12))
    with torch.no_grad():
        full = model(ids).float()  # (1, 12, vocab): the unwidened forward
        with widened_products([torch.bfloat16]):
            cache = KVCache(model, batch_size=1, max_len=12)
            steps = [prefill(model, ids[:, :8], cache)]
            steps += [decode_step(model, ids[:, t : t + 1], cache) for t in range(8, 12)]
    assert calls  # the prompt's convolution took the widened path
    torch.testing.assert_close(torch.stack(steps, dim=1).float(), full[:, 7:], atol=0.1, rtol=0.05)


def test_gradients_flow_through_a_widened_product():
    layer = Linear(32, 16).bfloat16()
    x = torch.randn(4, 32).bfloat16().requires_grad_()
    with widened_products([torch.bfloat16]):
        layer(x).float().sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.dtype == torch.bfloat16
    expected = x.detach().float().sum(0).expand(16, 32)  # d(sum)/dW = the rows' sum, every output
    torch.testing.assert_close(layer.weight.grad.float(), expected, atol=0.05, rtol=0.01)


def test_a_cpu_run_widens_the_dtypes_the_probe_measured_slow(monkeypatch):
    """An AVX2-only host's bfloat16 GEMM (1.2 against float32's 120 GFLOP/s) is widened in a
    run's phases; float16, measured fast enough, is not; off the CPU nothing is."""
    slow = host_probe.HostPeaks(
        "sl0w", {"threads": 1}, 1e9, {"float32": 1e9}, {"float32": 120e9, "bfloat16": 1.2e9, "float16": 70e9}, 0, 0.0
    )
    assert slow.widened_matmul_dtypes == ["bfloat16"]
    monkeypatch.setattr(run, "host_peaks", lambda: slow)
    assert run._widened_dtypes(torch.device("cpu")) == [torch.bfloat16]
    assert run._widened_dtypes(torch.device("cuda")) == []
    calls: list[torch.dtype] = []
    widen = widened.linear
    monkeypatch.setattr(widened, "linear", lambda x, w, b: calls.append(x.dtype) or widen(x, w, b))
    run.bench(tiny_spec("qwen3-0.6b"), prompt_len=8, gen_len=2, repeats=1, device="cpu", dtype="bfloat16")
    assert calls and set(calls) == {torch.bfloat16}  # the prefill's products
    assert widened._WIDENED.dtypes == frozenset()  # and only while the run's phases ran

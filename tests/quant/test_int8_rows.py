"""zoo.quant.int8_rows: the C++ one-row int8 kernel a large int8 matrix (a tied LM head) takes
on the CPU, eagerly and inside a compiled graph, equals its reference and torch's own int8
kernel; small matrices, several rows, the off switch and a machine that cannot build it keep
torch's kernel; a prompt's rows go through widened tiles equal to the weight in their dtype."""

from __future__ import annotations

import pytest
import torch

from zoo.components import row_product
from zoo.quant import int8_rows, kernels, q8
from zoo.quant.linear import Int8Linear


def head(rows: int = 8192, width: int = 576) -> Int8Linear:
    """An int8 layer (8192 x 576 int8: 4.5 MiB, over the kernel's size threshold)."""
    weight = torch.randn(rows, width, generator=torch.Generator().manual_seed(0)) / width**0.5
    return Int8Linear(weight, None, torch.bfloat16)


def reference(layer: Int8Linear, x: torch.Tensor) -> torch.Tensor:
    """torch's int8 weight kernel (what zoo used before), (1, out)."""
    return torch.ops.aten._weight_int8pack_mm(x, layer.qweight, layer.scales.to(x.dtype))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_one_row_through_the_kernel_is_within_its_int8_activations_of_torchs_exact_kernel(dtype: torch.dtype) -> None:
    """llama.cpp's numerics: the activation row rounded to int8 per 32 inputs costs about half
    a percent of the largest output against torch's exact weight-only product."""
    layer = head()
    x = torch.randn(1, 576, generator=torch.Generator().manual_seed(1)).to(dtype)
    with torch.no_grad():
        assert int8_rows.applies(x, layer.qweight)
        got = layer(x)
    assert got.dtype == dtype and got.shape == (1, 8192)
    exact = reference(layer, x).float()
    assert (got.float() - exact).abs().max() <= 1e-2 * exact.abs().max()
    assert torch.nn.functional.cosine_similarity(got.float(), exact).item() > 0.9999


def test_the_activation_blocks_are_llama_cpps_q8_0_values() -> None:
    """zoo's activation blocks equal gguf-py's own Q8_0 quantizer's (scale rounded to float16 there)."""
    gguf = pytest.importorskip("gguf")
    x = torch.randn(576, generator=torch.Generator().manual_seed(4))
    xq, d = q8.quantize_blocks(x)
    raw = gguf.quants.quantize(x.numpy()[None], gguf.GGMLQuantizationType.Q8_0).reshape(-1, 34)  # (18, 2 + 32)
    theirs = torch.from_numpy(raw[:, 2:].copy().view("int8"))  # (18, 32)
    assert torch.equal(xq, theirs)
    torch.testing.assert_close(d, torch.from_numpy(raw[:, :2].copy().view("float16")).float()[:, 0], rtol=1e-3, atol=0)


def test_inside_a_compiled_graph_the_kernel_is_the_opaque_op_and_agrees() -> None:
    layer = head()
    x = torch.randn(1, 576, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    seen: list[object] = []

    def backend(graph: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> object:
        seen.extend(node.target for node in graph.graph.nodes if node.op == "call_function")
        return graph.forward

    compiled = torch.compile(layer, backend=backend, fullgraph=True)
    with torch.no_grad():
        got = compiled(x)
    assert torch.ops.zoo.row_product_int8_rows.default in seen
    torch.testing.assert_close(got, reference(layer, x), rtol=2e-2, atol=2e-2)


def test_one_row_keeps_its_leading_dims_and_many_rows_theirs() -> None:
    big = head()
    one = torch.randn(1, 1, 576, dtype=torch.bfloat16)  # a decode step's (B, T, d)
    many = torch.randn(2, 3, 576, dtype=torch.bfloat16)
    with torch.no_grad():
        got = kernels.int8_matmul(one, big.qweight, big.scales)
        assert got.shape == (1, 1, big.qweight.shape[0])
        assert torch.equal(got[0], kernels.int8_matmul(one[0], big.qweight, big.scales))
        assert torch.equal(int8_rows.int8_rows(big.qweight, big.scales, one[0, 0]), got[0, 0])  # (in,) -> (out,)
        rows = kernels.int8_matmul(many, big.qweight, big.scales)
        assert rows.shape == (2, 3, big.qweight.shape[0])
        assert torch.equal(rows.reshape(6, -1), kernels.int8_matmul(many.reshape(6, 576), big.qweight, big.scales))


def test_small_matrices_several_rows_and_the_switch_keep_torchs_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    big, small = head(), head(rows=64)  # 64 x 576: 36 KiB
    one, many = torch.randn(1, 576, dtype=torch.bfloat16), torch.randn(3, 576, dtype=torch.bfloat16)
    with torch.no_grad():
        assert not int8_rows.applies(one, small.qweight)  # the call's dispatch is the cost
        assert not int8_rows.applies(many, big.qweight)
        monkeypatch.setattr(int8_rows, "ENABLED", False)
        assert not int8_rows.applies(one, big.qweight)
        assert torch.equal(kernels.int8_matmul(one, big.qweight, big.scales), reference(big, one))
    monkeypatch.setattr(int8_rows, "ENABLED", True)
    assert not int8_rows.applies(one, big.qweight)  # grad mode on: not a decode step


@pytest.mark.parametrize("threads", [1, 2])
def test_the_kernel_equals_its_reference_at_any_row_length(threads: int) -> None:
    generator = torch.Generator().manual_seed(3)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for rows, width in [(8192, 576), (300, 4608), (97, 70)]:
            q = torch.randint(-127, 128, (rows, width), dtype=torch.int8, generator=generator)
            scales, x = torch.rand(rows, generator=generator) / 100, torch.randn(width, generator=generator)
            with torch.no_grad():
                got = int8_rows.int8_rows(q, scales, x)
            expected = int8_rows.reference(q, scales, x)  # the same numerics, float32 sums in another order
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6 * expected.abs().max().item())
    finally:
        torch.set_num_threads(previous)


def test_rows_fetched_ahead_or_not_sum_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each row is fetched ahead of its read only where the run fetches a step's weights ahead
    (``row_product.past_cache``, the op's ``fetch_ahead``): the same sums either way."""
    generator = torch.Generator().manual_seed(5)
    q = torch.randint(-127, 128, (1027, 576), dtype=torch.int8, generator=generator)
    scales, x = torch.rand(1027, generator=generator) / 100, torch.randn(576, generator=generator)
    with torch.no_grad():
        with row_product.past_cache(False):
            plain = int8_rows.int8_rows(q, scales, x)
        with row_product.past_cache(True):
            assert torch.equal(int8_rows.int8_rows(q, scales, x), plain)
            seen: list[object] = []
            monkeypatch.setattr(row_product.EXTENSION, "op", lambda name: lambda *args: seen.append(args[-1]))
            int8_rows.int8_rows(q, scales, x)
    assert seen == [True]


def test_a_rows_sum_does_not_depend_on_how_the_threads_split_the_rows() -> None:
    """Each thread reads four rows at once and its last ones alone, with the same arithmetic:
    1027 rows over one and over two threads give the same outputs, bit for bit."""
    generator = torch.Generator().manual_seed(4)
    q = torch.randint(-127, 128, (1027, 576), dtype=torch.int8, generator=generator)
    scales, x = torch.rand(1027, generator=generator) / 100, torch.randn(576, generator=generator)
    previous, outputs = torch.get_num_threads(), []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with torch.no_grad():
                outputs.append(int8_rows.int8_rows(q, scales, x))
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(outputs[0], outputs[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [int8_rows.TILES_FROM, 130])
def test_many_rows_go_through_widened_tiles_equal_to_the_weight_in_their_dtype(dtype: torch.dtype, rows: int) -> None:
    """A prompt's rows: the int8 weight times its scales, rounded to the rows' dtype (a
    bfloat16 model's weights), times the rows; 300 weight rows make a tile and a tail."""
    generator = torch.Generator().manual_seed(4)
    q = torch.randint(-127, 128, (300, 96), dtype=torch.int8, generator=generator)
    scales = (torch.rand(300, generator=generator) / 100).bfloat16()
    x = torch.randn(rows, 96, generator=generator).to(dtype)
    with torch.no_grad():
        assert int8_rows.tiles_apply(x, q) and not int8_rows.tiles_apply(x[: int8_rows.TILES_FROM - 1], q)
        got = kernels.int8_matmul(x, q, scales)
    weight = (q.float() * scales.float()[:, None]).to(dtype).float()  # (300, 96) as the tiles hold it
    expected = x.float() @ weight.T  # (rows, 300)
    assert got.dtype == dtype and got.shape == (rows, 300)
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(got, expected.to(dtype), **tolerance)
    exact = x.float() @ (q.float() * scales.float()[:, None]).T  # torch's int8 kernel's weight
    assert (got.float() - exact).abs().max() <= 1e-2 * exact.abs().max()


def test_where_the_kernel_cannot_be_built_torchs_kernel_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = head()
    x = torch.randn(1, 576, dtype=torch.bfloat16)
    monkeypatch.setattr(int8_rows.row_product, "available", lambda: False)
    with torch.no_grad():
        assert not int8_rows.enabled() and not int8_rows.applies(x, layer.qweight)
        assert torch.equal(layer(x), reference(layer, x))  # torch's exact kernel, not the int8 activations


def test_decode_through_the_kernel_gives_the_logits_of_torchs_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tied int8 model (the head takes the kernel: size threshold lowered to the tiny head)
    decodes, eagerly and compiled, to the logits it gives with the kernel switched off."""
    import zoo
    from tests.conftest import tiny_spec
    from zoo.model.cache import KVCache
    from zoo.model.generation import compile_decode_step, decode_step, prefill
    from zoo.quant import quantize

    spec = tiny_spec("llama-3.2-1b")  # tied embeddings, as SmolLM2
    model = quantize(zoo.build(spec, device="cpu", dtype="bfloat16", seed=0).eval(), "int8")
    monkeypatch.setattr(int8_rows, "MIN_WEIGHT_BYTES", 0)
    prompt = torch.randint(spec.vocab_size, (1, 6), generator=torch.Generator().manual_seed(0))

    def logits(step: object, switch: bool) -> torch.Tensor:
        monkeypatch.setattr(int8_rows, "ENABLED", switch)
        cache = KVCache(model, 1, 10, dtype=torch.bfloat16, device="cpu")
        token = prefill(model, prompt, cache).argmax(-1, keepdim=True)  # (1, 1)
        first = step(model, token, cache)  # type: ignore[operator]
        second = step(model, first.argmax(-1, keepdim=True), cache)  # type: ignore[operator]
        return torch.stack((first, second)).float()  # (2, 1, vocab)

    with torch.no_grad():
        reference = logits(decode_step, False)
        torch.testing.assert_close(logits(decode_step, True), reference, rtol=2e-2, atol=2e-2)
        assert int8_rows.applies(torch.ones(1, spec.d_model, dtype=torch.bfloat16), model.lm_head.qweight)
        torch.testing.assert_close(logits(compile_decode_step(), True), reference, rtol=2e-2, atol=2e-2)


def test_a_prompts_rows_in_a_widened_dtype_run_the_tiles_in_float32_rounded_once() -> None:
    """Where the run widens bfloat16 (no native half-precision GEMM on the host), a prompt's rows
    go through the float32 tiles and are rounded once; a decode row keeps its own kernel."""
    from zoo.components.widened import widened_products

    generator = torch.Generator().manual_seed(5)
    q = torch.randint(-127, 128, (300, 96), dtype=torch.int8, generator=generator)
    scales = (torch.rand(300, generator=generator) / 100).bfloat16()
    x = torch.randn(int8_rows.TILES_FROM + 3, 96, generator=generator).bfloat16()
    with torch.no_grad():
        native = kernels.int8_matmul(x, q, scales)
        with widened_products([torch.bfloat16]):
            got = kernels.int8_matmul(x, q, scales)
            one = kernels.int8_matmul(x[:1], q, scales)
        expected = int8_rows.int8_tiles(x.float(), q, scales).bfloat16()
    assert got.dtype == torch.bfloat16 and torch.equal(got, expected)
    assert torch.equal(one, kernels.int8_matmul(x[:1], q, scales))
    assert (got.float() - native.float()).abs().max() <= 2e-2 * native.float().abs().max()


def test_rows_torchs_kernel_cannot_take_go_another_way() -> None:
    """Rows whose last dim is strided (Mamba's x_proj reads a transposed convolution output)
    and half-precision rows of a width no multiple of 16 (which torch 2.13's kernel reads past,
    a segmentation fault) give the dequantized product."""
    layer = head(rows=64, width=24)
    g = torch.Generator().manual_seed(9)
    strided = torch.randn(1, 24, 5, generator=g).transpose(1, 2)  # (1, 5, 24), last dim strided
    for x in (strided, strided.bfloat16().contiguous()):
        with torch.no_grad():
            got = kernels.int8_matmul(x, layer.qweight, layer.scales).float()  # (1, 5, 64)
        exact = x.float() @ (layer.qweight.float() * layer.scales.float()[:, None]).T
        torch.testing.assert_close(got, exact, atol=0.05 * exact.abs().max().item(), rtol=0)

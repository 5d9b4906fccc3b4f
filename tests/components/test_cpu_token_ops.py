"""zoo.components.cpu_token_ops: the C++ RMS and layer norms, rotary rotation and GELU equal
the PyTorch expressions they replace, for one row and many, Llama's and Gemma's norm, partial
and batched rotary tables, with and without a bias; autograd, compiled graphs and the switch
keep PyTorch's. The greedy pick is
``argmax`` exactly: ties, NaNs, infinities and signed zeros included.

The rotation in half precision is exact (each product of two half-precision numbers is exact
in float32, then rounded as PyTorch rounds it); in float32 it may differ by a fused
multiply-add's ulp. The norm sums its squares in another order than PyTorch's reduction, so
its scale may differ in the last float32 bit, which can move a half-precision result by one
unit of its rounding."""

from __future__ import annotations

import pytest
import torch

from zoo.components import cpu_token_ops
from zoo.components.activations import ACTIVATIONS
from zoo.components.norms import LayerNorm, RMSNorm
from zoo.components.rope import RopeRotation, rope_cos_sin

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _torch_path(monkeypatch: pytest.MonkeyPatch, call):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(cpu_token_ops, "ENABLED", False)
    try:
        return call()
    finally:
        monkeypatch.setattr(cpu_token_ops, "ENABLED", True)


def _exact_in_half(got: torch.Tensor, expected: torch.Tensor) -> None:
    if got.dtype == torch.float32:
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
    else:
        assert torch.equal(got, expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("unit_offset", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 576), (2, 9, 64), (3, 130)])
def test_the_norm_is_the_pytorch_norm(monkeypatch, dtype, unit_offset, shape):
    norm = RMSNorm(shape[-1], eps=1e-6, unit_offset=unit_offset).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(shape[-1]) * 0.1 + (0 if unit_offset else 1))
    x = (torch.randn(*shape, generator=torch.Generator().manual_seed(1)) * 3).to(dtype)
    with torch.no_grad():
        assert cpu_token_ops.rms_norm_applies(x, norm.weight)
        got = norm(x)
        expected = _torch_path(monkeypatch, lambda: norm(x))
    assert got.dtype == expected.dtype == dtype and got.shape == x.shape
    torch.testing.assert_close(got, expected)  # the dtype's own tolerance: one unit of its rounding


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 1, 768), (2, 9, 64), (3, 130)])
def test_the_layer_norm_is_the_pytorch_layer_norm(monkeypatch, dtype, bias, shape):
    """Within the dtype's own tolerance: the moments are summed in another order than ATen's
    (two passes where it runs Welford's), which may move the last float32 bit."""
    norm = LayerNorm(shape[-1], eps=1e-5, bias=bias).to(dtype)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(shape[-1], generator=g) * 0.2 + 1)
        if norm.bias is not None:
            norm.bias.copy_(torch.randn(shape[-1], generator=g) * 0.1)
    x = (torch.randn(*shape, generator=g) * 3 + 1.5).to(dtype)  # an offset: the mean matters
    with torch.no_grad():
        assert cpu_token_ops.layer_norm_applies(x, norm.weight, norm.bias)
        got = norm(x)
        expected = _torch_path(monkeypatch, lambda: norm(x))
    assert got.dtype == expected.dtype == dtype and got.shape == x.shape
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["gelu", "gelu_tanh"])
@pytest.mark.parametrize("shape", [(1, 1, 3072), (2, 5, 37)])
def test_gelu_is_the_pytorch_gelu(monkeypatch, dtype, name, shape):
    """The exact form within the dtype's tolerance of ``F.gelu``. The tanh form is computed as
    ``x * sigmoid(2u)``: within the tolerance of the float64 value and of ``F.gelu``'s (whose
    ``1 + tanh(u)`` cancels for negative x); no overflow where ``exp(-2u)`` would."""
    x = (torch.randn(*shape, generator=torch.Generator().manual_seed(3)) * 4).to(dtype)
    x.view(-1)[:6] = torch.tensor([-100.0, -20.0, -9.0, 0.0, 20.0, 100.0]).to(dtype)
    act = ACTIVATIONS[name]
    approximate = "tanh" if name == "gelu_tanh" else "none"
    with torch.no_grad():
        assert cpu_token_ops.gelu_applies(x)
        got = act(x)
        expected = _torch_path(monkeypatch, lambda: act(x))
    assert got.dtype == dtype and got.shape == x.shape and torch.isfinite(got).all()
    torch.testing.assert_close(got, expected)
    exact = torch.nn.functional.gelu(x.double(), approximate=approximate)
    torch.testing.assert_close(got, exact.to(dtype))


def test_layer_norm_and_gelu_keep_pytorch_under_autograd(monkeypatch):
    norm = LayerNorm(16, eps=1e-5, bias=True)
    x = torch.randn(2, 16)
    assert not cpu_token_ops.layer_norm_applies(x, norm.weight, norm.bias)  # the weight wants its gradient
    assert not cpu_token_ops.gelu_applies(x)  # gradients on
    with torch.no_grad():
        assert cpu_token_ops.layer_norm_applies(x, norm.weight, norm.bias)
        assert not cpu_token_ops.layer_norm_applies(x.bfloat16(), norm.weight, norm.bias)  # mixed: PyTorch promotes
        assert not cpu_token_ops.layer_norm_applies(x[:, :8], norm.weight, norm.bias)  # another width
        assert cpu_token_ops.gelu_applies(x)
        monkeypatch.setattr(cpu_token_ops, "ENABLED", False)
        assert not cpu_token_ops.gelu_applies(x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("batch", "table_batch", "rot_dim"), [(1, 1, 64), (2, 1, 32), (2, 2, 48)])
def test_the_rotation_is_the_pytorch_rotation(monkeypatch, dtype, batch, table_batch, rot_dim):
    heads, tokens, head_dim = 3, 5, 64
    positions = (torch.arange(tokens) + 7).expand(table_batch, -1) + torch.arange(table_batch)[:, None]  # (B, T)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rot_dim, 2) / rot_dim))
    rotation = RopeRotation(*rope_cos_sin(positions, inv_freq, 1.0), interleaved=False)
    g = torch.Generator().manual_seed(batch * 100 + rot_dim)
    x = torch.randn(batch, tokens, heads, head_dim, generator=g).to(dtype).transpose(1, 2)  # (B, H, T, D) strided
    with torch.no_grad():
        assert cpu_token_ops.rope_applies(x, rotation._tables_for(dtype)[0])
        got = rotation._apply(x)
        expected = _torch_path(monkeypatch, lambda: rotation._apply(x))
    assert got.shape == expected.shape == x.shape
    _exact_in_half(got, expected)


def test_autograd_compiled_graphs_and_the_switch_keep_pytorch(monkeypatch):
    norm = RMSNorm(16, eps=1e-6)
    x = torch.randn(2, 16)
    assert not cpu_token_ops.rms_norm_applies(x, norm.weight)  # the weight wants its gradient
    norm.weight.requires_grad_(False)
    assert not cpu_token_ops.rms_norm_applies(x, norm.weight)  # a training forward (a frozen base under LoRA)
    norm.weight.requires_grad_(True)
    with torch.no_grad():
        assert cpu_token_ops.rms_norm_applies(x, norm.weight)
        assert not cpu_token_ops.rms_norm_applies(x.double(), norm.weight.double())
        assert not cpu_token_ops.rms_norm_applies(x.bfloat16(), norm.weight)  # mixed dtypes: PyTorch promotes
        monkeypatch.setattr(cpu_token_ops, "ENABLED", False)
        assert not cpu_token_ops.rms_norm_applies(x, norm.weight)
        monkeypatch.setattr(cpu_token_ops, "ENABLED", True)
        seen: list[object] = []

        def backend(graph: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> object:
            seen.extend(node.target for node in graph.graph.nodes if node.op == "call_function")
            return graph.forward

        torch.compile(norm, backend=backend, fullgraph=True)(x)
    assert not any("row_product_rms_norm" in str(target) for target in seen)  # inductor fuses the expression


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 2 * 1536), (2, 7, 2 * 40)])
def test_silu_and_mul_is_silu_of_the_gate_times_up(dtype, shape):
    """Within the dtype's own tolerance: the C++ exp is not Sleef's, so a float32 activation may
    differ in its last bits and a half-precision one, rarely, by one unit of its rounding."""
    joint = (torch.randn(*shape, generator=torch.Generator().manual_seed(4)) * 4).to(dtype)  # (..., 2F)
    gate, up = joint.chunk(2, dim=-1)
    with torch.no_grad():
        assert cpu_token_ops.silu_and_mul_applies(joint)
        got = cpu_token_ops.silu_and_mul(joint)
    assert got.shape == (*shape[:-1], shape[-1] // 2) and got.dtype == dtype
    torch.testing.assert_close(got, torch.nn.functional.silu(gate) * up)


def test_a_fused_swiglu_ffn_takes_one_call_between_its_products_and_equals_the_unfused(monkeypatch):
    from zoo.components.ffn import GatedMLP
    from zoo.components.fused import fuse_group

    torch.manual_seed(0)
    plain = GatedMLP(32, 80, "silu", bias=False).eval()
    fused = GatedMLP(32, 80, "silu", bias=False).eval()
    fused.load_state_dict(plain.state_dict())
    assert fuse_group(fused, "gate_up_proj", ("gate_proj", "up_proj"))
    calls: list[torch.Size] = []
    real = cpu_token_ops.silu_and_mul
    monkeypatch.setattr(cpu_token_ops, "silu_and_mul", lambda joint: calls.append(joint.shape) or real(joint))
    x = torch.randn(2, 3, 32)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), plain(x), atol=1e-6, rtol=1e-6)
        assert calls == [torch.Size((2, 3, 160))]
        plain(x)
    assert calls == [torch.Size((2, 3, 160))]  # unfused: PyTorch's expression
    fused(x)  # gradients on: PyTorch's expression
    assert len(calls) == 1


def _logits_with_edges(dtype: torch.dtype, vocab: int, case: str) -> torch.Tensor:
    """(4, vocab) logits: random, tied, with NaNs, with infinities, or all of one edge value."""
    g = torch.Generator().manual_seed(vocab)
    x = torch.randn(4, vocab, generator=g)
    picks = lambda n: torch.randint(vocab, (n,), generator=g)
    if case == "ties":
        x = x.round()  # many equal maxima: the first wins
    elif case == "nan":
        x[0, picks(3)] = float("nan")  # the first NaN wins, whatever its sign
        x[1, picks(2)] = -float("nan")
    elif case == "inf":
        x[:, picks(2)] = float("inf")
        x[:, picks(2)] = -float("inf")
    elif case == "all -inf":
        x.fill_(-float("inf"))
    elif case == "signed zeros":
        x = torch.zeros(4, vocab)
        x[:, vocab // 2 :] = -0.0  # -0 ties +0: the first of either wins
        x[1] = -x[1]
    elif case == "negative":
        x = -x.abs() - 1
    return x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab", [1, 255, 256, 257, 1000, 49152])
@pytest.mark.parametrize("case", ["random", "ties", "nan", "inf", "all -inf", "signed zeros", "negative"])
def test_the_greedy_pick_is_argmax(dtype, vocab, case):
    """Block boundaries (256), a vocabulary's size, and every value argmax orders its own way."""
    logits = _logits_with_edges(dtype, vocab, case)
    assert cpu_token_ops.greedy_applies(logits)
    got = cpu_token_ops.greedy(logits)
    assert got.dtype == torch.long and torch.equal(got, logits.argmax(-1))


def test_the_greedy_pick_reads_strided_rows_and_keeps_leading_dims():
    steps = torch.randn(3, 5, 700)  # (B, T, V): a prefill's logits
    last = steps[:, -1]  # (B, V), rows 5 * 700 apart
    assert torch.equal(cpu_token_ops.greedy(last), last.argmax(-1))
    assert torch.equal(cpu_token_ops.greedy(steps), steps.argmax(-1))
    assert not cpu_token_ops.greedy_applies(steps.transpose(1, 2))  # the vocabulary strided
    assert not cpu_token_ops.greedy_applies(torch.zeros(2, 0))
    assert not cpu_token_ops.greedy_applies(torch.zeros(2, 5, dtype=torch.float64))


def test_sampling_takes_the_supplied_pick_on_the_cpu_and_pytorch_without_it(monkeypatch):
    from zoo.model.sampling import greedy

    logits = torch.randn(2, 3000).bfloat16()
    calls = []
    real = cpu_token_ops.greedy
    monkeypatch.setattr(cpu_token_ops, "greedy", lambda x: calls.append(x.shape) or real(x))
    assert torch.equal(greedy(logits), logits.argmax(-1)) and calls == [logits.shape]
    monkeypatch.setattr(cpu_token_ops, "ENABLED", False)
    assert torch.equal(greedy(logits), logits.argmax(-1)) and len(calls) == 1

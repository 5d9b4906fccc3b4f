"""zoo's CPU int4 kernel (zoo/quant/int4_cpu.py): its layout against GGUF's block bytes, the
C++ kernel against PyTorch references of exactly its numerics (few token rows: llama.cpp's
int8 activation blocks; many: the exact float product), against the dequantized float product
with the documented error, ``from_groups`` exactness, a packed GGUF's decode logits, and the
compiled graph's opaque op against eager."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import zoo
from tests.hub.gguf.test_quants import VOCAB, encoder, tiny_qwen3
from tests.hub.gguf_files import gguf_tensors, write_gguf
from zoo.components import row_product
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill
from zoo.quant import int4_cpu, q8
from zoo.quant.linear import Int4Linear

Q8_ERROR = 3e-2  # few-row kernel against the float product, largest |error| / largest |output| (measured ~0.5-1.5e-2)


def _weights(out_features: int, in_features: int, group: int, dtype: torch.dtype, seed: int = 0):  # type: ignore[no-untyped-def]
    generator = torch.Generator().manual_seed(seed)
    values = torch.randint(0, 16, (out_features, in_features), generator=generator)  # (out, in)
    scales = torch.rand(out_features, in_features // group, generator=generator) * 0.02 + 1e-3  # (out, G)
    offsets = -8 * scales + torch.randn(out_features, in_features // group, generator=generator) * 1e-3
    so = torch.stack([scales, offsets], -1).to(dtype)  # (out, G, 2)
    return values, *int4_cpu.pack(values, so)


def _relative(got: torch.Tensor, expected: torch.Tensor) -> float:
    return ((got.float() - expected.float()).abs().max() / expected.float().abs().max()).item()


def test_the_layout_interleaves_each_panels_rows_as_documented() -> None:
    values, packed, so = _weights(37, 64, 32, torch.float32)  # two whole panels and one of 5 rows
    rows_so = torch.stack([torch.arange(37.0)[:, None].expand(37, 2), -torch.arange(37.0)[:, None].expand(37, 2)], -1)
    packed, so = int4_cpu.pack(values, rows_so)  # scale = row, offset = -row: each lane's row readable
    flat, flat_so = packed.reshape(-1).tolist(), so.reshape(-1).tolist()
    for row in range(37):
        start = row - row % 16
        lanes, lane = min(16, 37 - start), row % 16
        for block in range(2):
            for chunk in range(4):
                for i in range(4):
                    byte = flat[start * 32 + block * 16 * lanes + chunk * 4 * lanes + 4 * lane + i]
                    assert byte & 15 == values[row, 32 * block + 8 * chunk + i]
                    assert byte >> 4 == values[row, 32 * block + 8 * chunk + 4 + i]
            assert flat_so[start * 4 + block * 2 * lanes + lane] == row  # group `block`'s scale
            assert flat_so[start * 4 + block * 2 * lanes + lanes + lane] == -row  # and its offset
    back, back_so = int4_cpu.unpack(packed, so)
    assert torch.equal(back, values.to(torch.uint8)) and torch.equal(back_so, rows_so)


def test_activation_blocks_are_llama_cpps_q8_0_values() -> None:
    gguf = pytest.importorskip("gguf")
    x = torch.randn(2, 128, generator=torch.Generator().manual_seed(1))
    raw = gguf.quants.quantize(x.numpy(), gguf.GGMLQuantizationType.Q8_0).reshape(-1, 34)  # (blocks, 2 + 32)
    q = torch.from_numpy(raw[:, 2:].copy().view(np.int8)).float()  # (blocks, 32)
    scales = x.view(-1, 32).abs().amax(-1, keepdim=True) / 127  # float32 (gguf keeps them as float16)
    assert torch.equal(q8.dequantized(x).view(-1, 32), q * scales)


@pytest.mark.parametrize("rows", [1, 5, int4_cpu.TILE_FROM - 1, int4_cpu.TILE_FROM, 40])
@pytest.mark.parametrize("group", [32, 64, 128, 256])
@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_kernel_equals_its_numerics_in_pytorch(rows: int, group: int, scale_dtype: torch.dtype) -> None:
    assert int4_cpu.load() is not None
    _, packed, so = _weights(37, 512, group, scale_dtype)  # odd out_features: a 4-row group and a tail
    x = torch.randn(rows, 512, generator=torch.Generator().manual_seed(2))  # (M, in)
    few = rows < int4_cpu.TILE_FROM
    expected = (int4_cpu.reference_q8 if few else int4_cpu.reference)(x, packed, so)  # (M, out) float32
    got = int4_cpu.matmul(x, packed, so)
    assert got.shape == (rows, 37) and got.dtype == torch.float32
    assert _relative(got, expected) < 1e-5
    exact = int4_cpu.reference(x, packed, so)  # the dequantized weight's float product
    assert _relative(got, exact) < (Q8_ERROR if few else 1e-5)
    rows_bf16 = x.bfloat16()
    half = int4_cpu.matmul(rows_bf16, packed, so)  # bfloat16 in and out: one rounding of the same sums
    reference = (int4_cpu.reference_q8 if few else int4_cpu.reference_tiles)(rows_bf16, packed, so)
    assert half.dtype == torch.bfloat16
    assert _relative(half, reference) <= 2**-8


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_the_largest_integer_sums_are_exact(sign: float) -> None:
    """Every nibble 15 and every activation byte +-127: a block's eight byte-pair products summed
    (30480 in magnitude) at the edge of the int16 sums some instruction sets keep them in."""
    values = torch.full((48, 256), 15)  # (out, in): three whole panels
    so = torch.stack([torch.full((48, 8), 0.5), torch.zeros(48, 8)], -1)  # (out, G, 2): scale 0.5, offset 0
    packed, so = int4_cpu.pack(values, so)
    x = torch.full((1, 256), sign)  # (1, in): each block's bytes all +-127
    got = int4_cpu.matmul(x, packed, so)
    assert torch.equal(got, torch.full((1, 48), sign * 15 * 0.5 * 256))


@pytest.mark.parametrize("shape", [(1, 1, 256), (2, 3, 256), (256,)])
def test_the_kernel_keeps_the_leading_dims(shape: tuple[int, ...]) -> None:
    """A layer passes its (B, T, in) input as it is: the rows' products, shaped (B, T, out)."""
    _, packed, so = _weights(40, 256, 32, torch.float32)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(3)).bfloat16()
    got = int4_cpu.matmul(x, packed, so)
    assert got.shape == (*shape[:-1], 40)
    assert torch.equal(got.reshape(-1, 40), int4_cpu.matmul(x.reshape(-1, 256), packed, so))


def test_two_threads_give_the_one_thread_result() -> None:
    _, packed, so = _weights(1000, 256, 32, torch.float32)
    x = torch.randn(1, 256)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = int4_cpu.matmul(x, packed, so)
        torch.set_num_threads(2)
        assert torch.equal(int4_cpu.matmul(x, packed, so), one)  # whole rows per thread: same sums
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("out_features", [64, 1000, 4104])
def test_one_row_read_in_streams_sums_as_panel_by_panel(out_features: int) -> None:
    """A decode row's whole panels go four at a time (int4_rows_source's share_q8), two rows one
    panel at a time: each row's sums are the same bits either way, llama.cpp's numerics."""
    _, packed, so = _weights(out_features, 512, 128, torch.bfloat16)
    x = torch.randn(2, 512, generator=torch.Generator().manual_seed(4))  # (2, in)
    both = int4_cpu.matmul(x, packed, so)  # (2, out)
    for m in range(2):
        assert torch.equal(int4_cpu.matmul(x[m : m + 1], packed, so), both[m : m + 1])
    assert _relative(both, int4_cpu.reference_q8(x, packed, so)) < 1e-5


@pytest.mark.parametrize("out_features", [64, 4104])
def test_a_row_fetched_ahead_or_not_sums_the_same_bits(out_features: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The panels are fetched ahead of their reads only where the run fetches a step's weights
    ahead (``row_product.past_cache``, passed to the op as ``fetch_ahead``): the same sums
    either way, bit for bit."""
    _, packed, so = _weights(out_features, 512, 128, torch.bfloat16)
    x = torch.randn(1, 512, generator=torch.Generator().manual_seed(5)).bfloat16()  # (1, in)
    with row_product.past_cache(False):
        plain = int4_cpu.matmul(x, packed, so)
    with row_product.past_cache(True):
        assert torch.equal(int4_cpu.matmul(x, packed, so), plain)
        seen: list[object] = []
        monkeypatch.setattr(int4_cpu, "_MM", lambda *args: seen.append(args[-1]) or plain)
        int4_cpu.matmul(x, packed, so)
    assert seen == [True]


def test_from_groups_holds_the_values_exactly() -> None:
    values, packed, so = _weights(37, 96, 32, torch.float32)
    _, so = int4_cpu.unpack(packed, so)  # (37, 3, 2) by row
    scales, offsets = so[..., 0], so[..., 1]
    layer = Int4Linear.from_groups(values, scales, offsets, None, torch.float32)
    expected = values.float().view(37, 3, 32) * scales[..., None] + offsets[..., None]
    assert torch.equal(layer.dequantize(), expected.view(37, 96))
    assert layer.packed.shape == (37, 48) and layer.scale_offsets.shape == (37, 3, 2)


class _Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        weight = torch.randn(64, 96, generator=torch.Generator().manual_seed(3))
        self.a = Int4Linear(weight, torch.randn(64), torch.float32, 32)
        self.b = Int4Linear(weight.T.contiguous(), None, torch.float32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


@pytest.mark.parametrize("tokens", [1, int4_cpu.TILE_FROM])
def test_a_compiled_graph_runs_the_opaque_op_as_eager_runs_the_kernel(tokens: int) -> None:
    model = _Two()
    x = torch.randn(1, tokens, 96)
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True)(x)
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1"])
def test_a_packed_gguf_decodes_as_its_dequantized_model_within_the_documented_error(kind: str, tmp_path: Path) -> None:
    hf_model = tiny_qwen3()
    path = write_gguf(tmp_path / f"{kind}.gguf", hf_model, gguf_tensors(hf_model), encode=encoder(kind, {}))
    ids = torch.randint(0, VOCAB, (1, int4_cpu.TILE_FROM), generator=torch.Generator().manual_seed(0))
    logits = {}
    for name, dequantize in (("packed", False), ("floats", True)):
        model = zoo.from_pretrained(path, progress=False, dequantize=dequantize)
        cache = KVCache(model, 1, int4_cpu.TILE_FROM + 1, dtype=torch.float32, device="cpu")
        with torch.no_grad():
            whole = model(ids)  # (1, T, vocab): TILE_FROM rows through every layer, the exact tiles
            prefill(model, ids, cache)
            logits[name] = (whole, decode_step(model, ids[:, :1], cache))  # one row: int8 activation blocks
    (packed_prompt, packed_step), (float_prompt, float_step) = logits["packed"], logits["floats"]
    assert _relative(packed_prompt, float_prompt) < 1e-5
    assert 0 < _relative(packed_step, float_step) < Q8_ERROR
    assert F.cosine_similarity(packed_step, float_step).min() > 0.9999  # measured: 1e-2 and 0.99995


def test_layers_stack_where_every_part_but_the_last_fills_whole_panels() -> None:
    def layer(rows: int, seed: int) -> Int4Linear:
        weight = torch.randn(rows, 64, generator=torch.Generator().manual_seed(seed))
        return Int4Linear(weight, None, torch.float32, 32)

    parts = [layer(16, 0), layer(5, 1)]
    joint = Int4Linear.stack_rows(parts)
    assert joint is not None
    for tensor in ("packed", "scale_offsets"):  # the joint's rows split back into each part's own bytes
        pieces = getattr(joint, tensor).split([16, 5])
        assert all(torch.equal(piece, getattr(p, tensor)) for piece, p in zip(pieces, parts, strict=True))
    x = torch.randn(1, 64)
    assert torch.equal(joint(x), torch.cat([p(x) for p in parts], -1))
    assert Int4Linear.stack_rows([layer(24, 0), layer(8, 1)]) is None  # a split inside a panel


def test_a_prompts_rows_in_a_widened_dtype_run_in_float32_rounded_once() -> None:
    """Where the run widens bfloat16, a prompt's rows (``TILE_FROM`` or more) take the float32
    tiles and are rounded once; fewer rows keep their int8-activation path unchanged."""
    from zoo.components.widened import widened_products

    _, packed, so = _weights(64, 128, 32, torch.bfloat16)
    x = torch.randn(int4_cpu.TILE_FROM + 5, 128).bfloat16()
    few = x[: int4_cpu.TILE_FROM - 1]
    with torch.no_grad():
        native, native_few = int4_cpu.matmul(x, packed, so), int4_cpu.matmul(few, packed, so)
        with widened_products([torch.bfloat16]):
            got, got_few = int4_cpu.matmul(x, packed, so), int4_cpu.matmul(few, packed, so)
        expected = int4_cpu.matmul(x.float(), packed, so).bfloat16()
    assert got.dtype == torch.bfloat16 and torch.equal(got, expected)
    assert torch.equal(got_few, native_few)
    assert _relative(got, native) < 2e-2

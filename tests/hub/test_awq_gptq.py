"""AWQ and GPTQ checkpoints written here in the published packings, loaded by zoo.

The packing below is written from the formats' own descriptions, independently of zoo:
AutoAWQ GEMM (``awq/utils/packing_utils.py``: eight output columns per int32 in the order
[0, 2, 4, 6, 1, 3, 5, 7]) and AutoGPTQ (``qlinear_cuda_old.py``: eight input rows per int32,
lowest nibble first; zeros stored minus one in the v1 format). The reference is transformers'
model holding the dequantized float weights ``(q - z) * s``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import zoo
from tests.hub.conftest import make_hf_model
from zoo.errors import CheckpointError
from zoo.quant import stored_bytes
from zoo.quant.linear import Int4Linear, PermutedInt4Linear

AWQ_PACK_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def to_int32(words: np.ndarray) -> torch.Tensor:
    """uint32 words -> the int32 tensor the formats store (bit pattern kept)."""
    return torch.from_numpy(words.astype(np.uint32).view(np.int32).copy())


def pack_awq(ints: torch.Tensor) -> torch.Tensor:
    """(rows, cols) 4-bit ints -> (rows, cols / 8): word c holds column 8c + ORDER[k] at bits 4k."""
    a = ints.numpy().astype(np.uint64)
    words = np.zeros((a.shape[0], a.shape[1] // 8), dtype=np.uint64)
    for c in range(words.shape[1]):
        for k in range(8):
            words[:, c] |= a[:, 8 * c + AWQ_PACK_ORDER[k]] << np.uint64(4 * k)
    return to_int32(words)


def pack_gptq_rows(ints: torch.Tensor, bits: int) -> torch.Tensor:
    """(in, out) ints -> (in * bits / 32, out): word r holds row per*r + k at bits k*bits."""
    per, a = 32 // bits, ints.numpy().astype(np.uint64)
    words = np.zeros((a.shape[0] // per, a.shape[1]), dtype=np.uint64)
    for r in range(words.shape[0]):
        for k in range(per):
            words[r] |= a[per * r + k] << np.uint64(k * bits)
    return to_int32(words)


def pack_gptq_columns(ints: torch.Tensor, bits: int) -> torch.Tensor:
    return pack_gptq_rows(ints.T.contiguous(), bits).T.contiguous()


def quantized_layer(
    method: str, in_f: int, out_f: int, group: int, *, sym: bool, act_order: bool, bits: int, gen: torch.Generator
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Random packed tensors of one layer and the float weight (out, in) they mean."""
    g = in_f if group == -1 else group
    n_groups = in_f // g
    q = torch.randint(0, 2**bits, (in_f, out_f), generator=gen)
    if sym:
        zeros = torch.full((n_groups, out_f), 2 ** (bits - 1))
    else:
        zeros = torch.randint(1, 2**bits, (n_groups, out_f), generator=gen)
    scales = (torch.rand(n_groups, out_f, generator=gen) * 0.02 + 0.005).half()
    g_idx = torch.arange(in_f) // g
    if act_order:
        g_idx = torch.empty(in_f, dtype=torch.long)
        g_idx[torch.randperm(in_f, generator=gen)] = torch.arange(in_f) // g
    weight = ((q - zeros[g_idx]).float() * scales.float()[g_idx]).T.contiguous()  # (out, in)
    if method == "awq":
        return {"qweight": pack_awq(q), "qzeros": pack_awq(zeros), "scales": scales}, weight
    return {
        "qweight": pack_gptq_rows(q, bits),
        "qzeros": pack_gptq_columns(zeros - 1, bits),
        "scales": scales,
        "g_idx": g_idx.to(torch.int32),
    }, weight


def write_checkpoint(
    tmp_path: Path,
    family: str,
    method: str,
    *,
    group: int = 32,
    sym: bool = False,
    act_order: bool = False,
    bits: int = 4,
):  # type: ignore[no-untyped-def]
    """A tiny checkpoint of ``family`` whose layers' linears are packed; the transformers
    model with the dequantized weights is the reference."""
    hf = make_hf_model(family)
    folder = tmp_path / f"{family}-{method}"
    hf.save_pretrained(folder)
    tensors = load_file(folder / "model.safetensors")
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, module in hf.named_modules():
            if name.rsplit(".", 1)[-1] in LINEARS:
                packed, weight = quantized_layer(
                    method,
                    module.in_features,
                    module.out_features,
                    group,
                    sym=sym,
                    act_order=act_order,
                    bits=bits,
                    gen=gen,
                )
                module.weight.copy_(weight)
                del tensors[f"{name}.weight"]
                tensors.update({f"{name}.{k}": v for k, v in packed.items()})
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = (
        {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm"}
        if method == "awq"
        else {
            "quant_method": "gptq",
            "bits": bits,
            "group_size": group,
            "sym": sym,
            "desc_act": act_order,
            "checkpoint_format": "gptq",
            "damp_percent": 0.01,
        }
    )
    (folder / "config.json").write_text(json.dumps(config))
    return hf, folder


def assert_matches(hf, folder: Path) -> zoo.ZooModel:  # type: ignore[no-untyped-def]
    model = zoo.from_pretrained(folder, progress=False)
    ids = torch.randint(0, hf.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = hf(ids).logits
        got = model(ids)
    assert (got - expected).abs().max().item() < 1e-4
    return model


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_awq_loads_into_int4_and_matches_dequantized(tmp_path: Path, family: str) -> None:
    hf, folder = write_checkpoint(tmp_path, family, "awq")
    model = assert_matches(hf, folder)
    layers = [m for m in model.modules() if isinstance(m, Int4Linear)]
    assert len(layers) == 7 * hf.config.num_hidden_layers
    assert model.weights_layout.startswith("awq 4-bit g32 -> int4 x14")


@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_sym_asym_with_and_without_act_order(tmp_path: Path, sym: bool, act_order: bool) -> None:
    hf, folder = write_checkpoint(tmp_path, "llama", "gptq", sym=sym, act_order=act_order)
    model = assert_matches(hf, folder)
    permuted = [m for m in model.modules() if isinstance(m, PermutedInt4Linear)]
    assert len(permuted) == (14 if act_order else 0)
    assert "v1 zeros (+1)" in model.weights_layout


def test_gptq_per_channel_and_qwen3(tmp_path: Path) -> None:
    hf, folder = write_checkpoint(tmp_path, "qwen3", "gptq", group=-1)
    model = assert_matches(hf, folder)
    assert {m.group_size for m in model.modules() if isinstance(m, Int4Linear)} == {32, 64}  # 96 = 3 x 32, 64


def test_gptq_8bit_is_dequantized_exactly_and_says_so(tmp_path: Path) -> None:
    hf, folder = write_checkpoint(tmp_path, "llama", "gptq", bits=8)
    model = assert_matches(hf, folder)
    assert not any(isinstance(m, Int4Linear) for m in model.modules())
    assert "dequantized to float32 x14" in model.weights_layout


def test_weight_bytes_are_the_layout_as_stored(tmp_path: Path) -> None:
    hf, folder = write_checkpoint(tmp_path, "llama", "gptq", act_order=True)
    model = zoo.from_pretrained(folder, progress=False)
    floats = sum(p.numel() * 4 for n, p in hf.named_parameters() if n.rsplit(".", 2)[-2] not in LINEARS)
    packed = 0
    for name, module in hf.named_modules():
        if name.rsplit(".", 1)[-1] in LINEARS:
            out_padded = -(-module.out_features // 16) * 16
            # 4-bit values two per byte; per group of 32 inputs a float32 scale and zero per
            # output row; the int32 input order of act-order layers
            packed += out_padded * module.in_features // 2 + module.in_features // 32 * out_padded * 2 * 4
            packed += module.in_features * 4
    assert stored_bytes(model) == floats + packed


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t[:, :-1].contiguous(), "has shape"),
        (lambda t: t.float(), "has dtype float32"),
    ],
)
def test_corrupt_qweight_is_an_error_naming_the_tensor(tmp_path: Path, change, message: str) -> None:  # type: ignore[no-untyped-def]
    _, folder = write_checkpoint(tmp_path, "llama", "awq")
    tensors = load_file(folder / "model.safetensors")
    name = "model.layers.1.mlp.up_proj.qweight"
    tensors[name] = change(tensors[name])
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=rf"'{name}' {message}"):
        zoo.from_pretrained(folder, progress=False)


def test_missing_scales_and_unknown_method_are_errors(tmp_path: Path) -> None:
    _, folder = write_checkpoint(tmp_path, "llama", "gptq")
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.0.self_attn.q_proj.scales"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="missing tensor 'model.layers.0.self_attn.q_proj.scales'"):
        zoo.from_pretrained(folder, progress=False)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 3}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="quantization_config.bits: 3 is not supported"):
        zoo.from_pretrained(folder, progress=False)

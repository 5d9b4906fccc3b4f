"""A packed GGUF loads without float copies of its matrices: 8-bit matrices are re-quantized a
slice of rows at a time into exactly what re-quantizing the whole matrix gives, and the loaded
model holds its stored bytes and nothing more (SmolLM2's layout: Q4_1 layers, a Q8_0 table
tied to the head)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import zoo
from tests.hub.gguf.test_stays_quantized import tiny_llama
from tests.hub.gguf_files import gguf_tensors, write_gguf
from zoo.hub.gguf import quantized
from zoo.quant import stored_bytes
from zoo.quant.linear import Int4Linear, Int8Embedding, Int8Linear

gguf = pytest.importorskip("gguf")


def smollm_like(name: str, value: torch.Tensor) -> tuple[np.ndarray, Any]:
    """llama-quantize's Q4_1 choice for a 576-wide model: Q8_0 table, Q4_1 layers, F32 norms."""
    if value.dim() < 2:
        return value.numpy().astype(np.float32), gguf.GGMLQuantizationType.F32
    qtype = gguf.GGMLQuantizationType.Q8_0 if name == "token_embd.weight" else gguf.GGMLQuantizationType.Q4_1
    return gguf.quants.quantize(value.numpy().astype(np.float32), qtype), qtype


def all_q8(name: str, value: torch.Tensor) -> tuple[np.ndarray, Any]:
    if value.dim() < 2:
        return value.numpy().astype(np.float32), gguf.GGMLQuantizationType.F32
    return gguf.quants.quantize(value.numpy().astype(np.float32), gguf.GGMLQuantizationType.Q8_0), (
        gguf.GGMLQuantizationType.Q8_0
    )


def test_8_bit_matrices_requantized_by_slices_equal_the_whole_matrix_requantized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hf_model = tiny_llama()  # llama's q/k rows are permuted in the file: the scales must follow them
    path = write_gguf(tmp_path / "q8.gguf", hf_model, gguf_tensors(hf_model), encode=all_q8)
    monkeypatch.setattr(quantized, "ROWS_PER_SLICE", 7)  # slices that do not divide any matrix
    packed = zoo.from_pretrained(path, progress=False)
    floats = dict(zoo.from_pretrained(path, progress=False, dequantize=True).named_parameters())
    layers = {name: m for name, m in packed.named_modules() if isinstance(m, Int8Linear)}
    assert len(layers) == 8  # q, k, v, o, gate, up, down, head
    for name, layer in layers.items():  # the old way: the whole float matrix, quantized per row
        whole = Int8Linear(floats[f"{name}.weight"], None, torch.float32)
        assert torch.equal(layer.qweight, whole.qweight), name
        assert torch.equal(layer.scales, whole.scales), name


def test_a_smollm_shaped_file_holds_exactly_its_packed_bytes(tmp_path: Path) -> None:
    hf_model = tiny_llama()
    hf_model.config.tie_word_embeddings = True  # no output.weight written: the table is the head, as in SmolLM2
    path = write_gguf(tmp_path / "q4_1.gguf", hf_model, gguf_tensors(hf_model), encode=smollm_like)
    model = zoo.from_pretrained(path, dtype="bfloat16", progress=False)
    assert model.weights_layout == "Q4_1/Q8_0 -> int4 x7, int8 x1, int8 table (the head's); the rest bfloat16"
    held = {id(t): t for t in model.state_dict(keep_vars=True).values()}  # not RoPE's non-persistent inv_freq
    assert sum(t.numel() * t.element_size() for t in held.values()) == stored_bytes(model)
    assert not [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]  # no float matrix left
    table = next(m for m in model.modules() if isinstance(m, Int8Embedding))
    assert isinstance(model.lm_head, Int8Linear) and table.qweight is model.lm_head.qweight  # stored once
    d, vocab = hf_model.config.hidden_size, hf_model.config.vocab_size
    int4 = sum(m.stored_bytes() for m in model.modules() if isinstance(m, Int4Linear))
    norms = (2 * hf_model.config.num_hidden_layers + 1) * d * 2  # bfloat16
    assert stored_bytes(model) == int4 + vocab * d + vocab * 2 + norms  # int8 table, a bf16 scale per row

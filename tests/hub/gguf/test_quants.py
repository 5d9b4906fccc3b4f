"""Quantized GGUF tensors: zoo's logits from the GGUF equal its logits (and transformers') from
the same dequantized weights saved the Hugging Face way.

The ``gguf`` library quantizes F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, TQ1_0, TQ2_0 and MXFP4; its
K-quants (Q2_K..Q6_K) and IQ types are dequantize-only, so those blocks are random bytes with their float16 scales set
to sane values. Matrices are quantized, norms stay F32 (as llama.cpp leaves 1-D tensors).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import zoo
from tests.hub.gguf_files import RENAMES, gguf_tensors, write_gguf

gguf = pytest.importorskip("gguf")
QUANTIZED_BY_LIBRARY = [
    "F16",
    "BF16",
    "Q8_0",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "TQ1_0",
    "TQ2_0",
    "MXFP4",
]  # MXFP4: gpt-oss
# dequantize-only types: random blocks with their float16 scales (byte offset, value) set sane
K_QUANTS = {
    "Q4_K": ((0, 1e-4), (2, 1e-4)),
    "Q5_K": ((0, 1e-4), (2, 1e-4)),
    "Q6_K": ((208, 2e-5),),
    "Q2_K": ((80, 1e-4), (82, 1e-4)),
    "Q3_K": ((108, 1e-4),),
    "IQ2_XXS": ((0, 1e-4),),
    "IQ2_XS": ((0, 1e-4),),
    "IQ2_S": ((0, 1e-4),),
    "IQ3_XXS": ((0, 1e-4),),
    "IQ3_S": ((0, 1e-4),),
    "IQ1_S": ((0, 1e-4),),
    "IQ4_NL": ((0, 1e-4),),
    "IQ4_XS": ((0, 1e-4),),
}
VOCAB = 128


def tiny_qwen3() -> Any:
    """Rows of 256 values: the K-quants' block (QK_K)."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.Qwen3Config(
        hidden_size=256,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def random_k_blocks(kind: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Random K-quant blocks for a (rows, cols) tensor with float16 scales at their offsets."""
    qtype = gguf.GGMLQuantizationType[kind]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rows, cols = shape
    raw = np.random.default_rng(seed).integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    for offset, scale in K_QUANTS[kind]:
        raw[:, :, offset : offset + 2] = (
            np.full((rows, cols // block), scale, dtype=np.float16).view(np.uint8).reshape(rows, -1, 2)
        )
    return raw.reshape(rows, -1)


def encoder(kind: str, dequantized: dict[str, torch.Tensor]):  # type: ignore[no-untyped-def]
    """An ``encode`` for write_gguf: matrices in ``kind``, their dequantized values recorded."""
    qtype = gguf.GGMLQuantizationType[kind]

    def encode(name: str, value: torch.Tensor) -> tuple[np.ndarray, Any]:
        if value.dim() < 2:
            dequantized[name] = value
            return value.numpy().astype(np.float32), gguf.GGMLQuantizationType.F32
        if kind in K_QUANTS:
            raw = random_k_blocks(kind, tuple(value.shape), seed=len(dequantized))
        else:
            raw = gguf.quants.quantize(value.numpy().astype(np.float32), qtype)
        dequantized[name] = torch.from_numpy(gguf.quants.dequantize(raw, qtype).astype(np.float32)).reshape(value.shape)
        return raw, qtype

    return encode


def _hf_name(gguf_name: str, hf_names: list[str]) -> str:
    return next(n for n in hf_names for p, t in RENAMES if re.fullmatch(p, n) and re.sub(p, t, n) == gguf_name)


@pytest.mark.parametrize("kind", QUANTIZED_BY_LIBRARY + list(K_QUANTS))
def test_quantized_gguf_matches_the_dequantized_weights_loaded_the_hf_way(kind: str, tmp_path: Path) -> None:
    hf_model = tiny_qwen3()
    dequantized: dict[str, torch.Tensor] = {}
    path = write_gguf(tmp_path / f"{kind}.gguf", hf_model, gguf_tensors(hf_model), encode=encoder(kind, dequantized))
    names = list(hf_model.state_dict())
    hf_model.load_state_dict({_hf_name(g, names): t for g, t in dequantized.items()})
    hf_model.save_pretrained(tmp_path / "hf")

    model = zoo.from_pretrained(path, progress=False, dequantize=True)  # packed layouts: test_stays_quantized.py
    reference = zoo.from_pretrained(tmp_path / "hf", progress=False)
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got, expected, hf_logits = model(ids), reference(ids), hf_model(ids).logits
    assert got.abs().max().item() > 1e-3  # the weights are not all zero
    assert (got - expected).abs().max().item() < 1e-4
    assert (got - hf_logits).abs().max().item() < 1e-4

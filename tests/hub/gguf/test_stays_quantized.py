"""A quantized GGUF stays quantized: Q4_0 / Q4_1 / Q4_K blocks load into int4 layers holding
the file's 4-bit values and block scales (the weights equal gguf-py's dequantization), Q8_0
into int8 layers re-quantized per row (its logit error measured here), and ``dequantize=True``
keeps every weight in floats as before."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from tests.hub.gguf.test_quants import VOCAB, encoder, tiny_qwen3
from tests.hub.gguf_files import gguf_tensors, write_gguf
from zoo.quant import stored_bytes
from zoo.quant.linear import Int4Linear, Int8Linear

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")


def tiny_llama() -> Any:
    """llama.cpp permutes llama's q/k rows: the block scales must move with them."""
    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
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


def _logits(model: Any) -> torch.Tensor:
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return model(ids)


@pytest.mark.parametrize("make", [tiny_qwen3, tiny_llama])
@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q4_K"])
def test_4_bit_blocks_load_into_int4_layers_exactly(kind: str, make: Any, tmp_path: Path) -> None:
    hf_model = make()
    path = write_gguf(tmp_path / f"{kind}.gguf", hf_model, gguf_tensors(hf_model), encode=encoder(kind, {}))
    packed = zoo.from_pretrained(path, progress=False)
    floats = zoo.from_pretrained(path, progress=False, dequantize=True)
    layers = [m for m in packed.modules() if isinstance(m, Int4Linear)]
    assert len(layers) == 8 and layers[0].group_size == 32  # q, k, v, o, gate, up, down, head
    float_params = dict(floats.named_parameters())
    for name, module in packed.named_modules():
        if isinstance(module, Int4Linear):  # the file's weights, exactly (float32 scales)
            expected = float_params[f"{name}.weight"]
            assert (module.dequantize() - expected).abs().max().item() <= 1e-6 * expected.abs().max().item()
    got, reference = _logits(packed), _logits(floats)
    assert (got - reference).abs().max().item() < 1e-4
    assert packed.weights_layout == f"{kind} -> int4 x8; the rest float32"
    assert floats.weights_layout == f"{kind} -> float32"


def test_q8_0_loads_into_int8_layers_with_a_measured_error(tmp_path: Path) -> None:
    hf_model = tiny_qwen3()
    path = write_gguf(tmp_path / "q8.gguf", hf_model, gguf_tensors(hf_model), encode=encoder("Q8_0", {}))
    packed = zoo.from_pretrained(path, progress=False)
    floats = zoo.from_pretrained(path, progress=False, dequantize=True)
    assert sum(isinstance(m, Int8Linear) for m in packed.modules()) == 8
    got, reference = _logits(packed), _logits(floats)
    error = (got - reference).abs().max().item() / reference.abs().max().item()
    assert error < 2e-2  # per-row int8 re-quantization of Q8_0's per-32 blocks (measured: ~3e-3)


def test_q4_weight_bytes_are_the_packed_bytes(tmp_path: Path) -> None:
    hf_model = tiny_qwen3()
    path = write_gguf(tmp_path / "q4.gguf", hf_model, gguf_tensors(hf_model), encode=encoder("Q4_1", {}))
    packed = zoo.from_pretrained(path, dtype="bfloat16", progress=False)
    floats = zoo.from_pretrained(path, dtype="bfloat16", progress=False, dequantize=True)
    linear = sum(m.stored_bytes() for m in packed.modules() if isinstance(m, Int4Linear))
    dense = sum(m.dense_bytes(torch.bfloat16) for m in packed.modules() if isinstance(m, Int4Linear))
    assert linear == dense // 4 + dense // 16  # 4 bits per weight, a bf16 scale and zero per 32 weights
    assert stored_bytes(packed) < stored_bytes(floats) * 0.5


def test_zoo_show_weights_names_the_files_types_and_layouts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from zoo.cli import main

    hf_model = tiny_qwen3()
    path = write_gguf(tmp_path / "q4.gguf", hf_model, gguf_tensors(hf_model), encode=encoder("Q4_K", {}))
    assert main(["show", "--weights", str(path), "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    checkpoint = shown["analysis"]["checkpoint"]
    assert checkpoint["format"] == "gguf" and checkpoint["tensor_types"] == {
        "Q4_K": 9,
        "F32": 5,
    }  # 7 linears, head, table; 5 norms
    assert checkpoint["linear_layers_load_as"]["Q4_K"] == "int4"
    assert shown["analysis"]["params"]["total"] == sum(p.numel() for p in hf_model.parameters())
    assert main(["show", "--hf-config", str(path), "--format", "json"]) == 0  # metadata, not a UTF-8 JSON file
    assert json.loads(capsys.readouterr().out)["spec"] == shown["spec"]
    hf_model.save_pretrained(tmp_path / "hf")
    assert main(["show", "--weights", str(tmp_path / "hf"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["analysis"]["checkpoint"]["format"] == "safetensors"

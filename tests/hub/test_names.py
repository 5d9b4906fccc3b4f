"""Tensor layouts: gpt-oss MXFP4 experts dequantize exactly as transformers does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import zoo
from tests.hub.conftest import VOCAB
from zoo.hub.names import dequantize_mxfp4


def _random_mxfp4(shape: tuple[int, ...], generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """blocks (..., G, 16) uint8 and scales (..., G) uint8 for a (..., G * 32) tensor."""
    *lead, cols = shape
    groups = cols // 32
    blocks = torch.randint(0, 256, (*lead, groups, 16), generator=generator, dtype=torch.uint8)
    scales = torch.randint(121, 126, (*lead, groups), generator=generator, dtype=torch.uint8)  # 2^-6 .. 2^-2
    return blocks, scales


def test_dequantize_matches_transformers() -> None:
    mxfp4 = pytest.importorskip("transformers.integrations.mxfp4")
    blocks, scales = _random_mxfp4((3, 8, 64), torch.Generator().manual_seed(0))
    reference = mxfp4.convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)  # (E, cols, rows)
    assert torch.equal(dequantize_mxfp4(blocks, scales), reference.transpose(1, 2))


def test_mxfp4_gpt_oss_checkpoint_loads_with_transformers_logits(hf_checkpoints, tmp_path: Path) -> None:
    mxfp4 = pytest.importorskip("transformers.integrations.mxfp4")
    hf_model, folder = hf_checkpoints["gpt_oss"]
    target = tmp_path / "mxfp4"
    shutil.copytree(folder, target)
    tensors = load_file(target / "model.safetensors")
    generator = torch.Generator().manual_seed(1)
    expected_state = {}
    for name in [n for n in tensors if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        E, rows, cols = tensors.pop(name).shape  # unquantized layout (E, in, out)
        blocks, scales = _random_mxfp4((E, cols, rows), generator)  # quantized rows are outputs
        tensors[f"{name}_blocks"], tensors[f"{name}_scales"] = blocks, scales
        expected_state[name] = mxfp4.convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
    save_file(tensors, target / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((target / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"],
    }
    (target / "config.json").write_text(json.dumps(config))

    reference = type(hf_model)(hf_model.config).eval()  # same weights, experts replaced by the dequantized ones
    reference.load_state_dict({**hf_model.state_dict(), **expected_state})
    model = zoo.from_pretrained(target, progress=False)
    ids = torch.randint(0, VOCAB, (2, 16), generator=generator)
    with torch.no_grad():
        assert (model(ids) - reference(ids).logits).abs().max().item() < 1e-4


def test_gpt2_hub_layout_without_prefix_and_with_mask_buffers(hf_checkpoints, tmp_path: Path) -> None:
    """openai-community/gpt2 stores 'h.0...' (no 'transformer.') and causal-mask buffers."""
    hf_model, folder = hf_checkpoints["gpt2"]
    tensors = {k.removeprefix("transformer."): v for k, v in load_file(folder / "model.safetensors").items()}
    tensors["h.0.attn.bias"] = torch.ones(1, 1, 8, 8)
    target = tmp_path / "gpt2"
    target.mkdir()
    save_file(tensors, target / "model.safetensors", metadata={"format": "pt"})
    shutil.copy(folder / "config.json", target / "config.json")
    model = zoo.from_pretrained(target, progress=False)
    ids = torch.arange(12)[None]
    with torch.no_grad():
        assert (model(ids) - hf_model(ids).logits).abs().max().item() < 1e-4

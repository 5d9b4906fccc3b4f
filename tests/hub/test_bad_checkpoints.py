"""Broken checkpoints raise CheckpointError naming the file and the tensor; nothing is unpickled."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import zoo
from zoo.errors import CheckpointError


@pytest.fixture
def qwen3_copy(hf_checkpoints, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    _, folder = hf_checkpoints["qwen3"]
    target = tmp_path / "ckpt"
    shutil.copytree(folder, target)
    return target


def _load(folder: Path) -> None:
    zoo.from_pretrained(folder, progress=False)


def test_truncated_file(qwen3_copy: Path) -> None:
    weights = qwen3_copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) - 1000])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: truncated: tensor '[\w.]+'"):
        _load(qwen3_copy)


def test_corrupt_header(qwen3_copy: Path) -> None:
    weights = qwen3_copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[8:20] = b"\xff" * 12
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: corrupt safetensors header"):
        _load(qwen3_copy)


def _rewrite(folder: Path, edit) -> None:  # type: ignore[no-untyped-def]
    weights = folder / "model.safetensors"
    tensors = load_file(weights)
    edit(tensors)
    save_file(tensors, weights, metadata={"format": "pt"})


def test_wrong_shape(qwen3_copy: Path) -> None:
    name = "model.layers.1.self_attn.k_proj.weight"
    _rewrite(qwen3_copy, lambda t: t.__setitem__(name, torch.zeros(16, 64)))
    with pytest.raises(CheckpointError, match=rf"model\.safetensors: tensor '{name}' has shape \[16, 64\]"):
        _load(qwen3_copy)


def test_missing_tensor(qwen3_copy: Path) -> None:
    name = "model.layers.0.mlp.up_proj.weight"
    _rewrite(qwen3_copy, lambda t: t.pop(name))
    with pytest.raises(CheckpointError, match=rf"missing tensor '{name}'"):
        _load(qwen3_copy)


def test_unexpected_tensor(qwen3_copy: Path) -> None:
    _rewrite(qwen3_copy, lambda t: t.__setitem__("model.layers.0.mlp.extra.weight", torch.zeros(2)))
    with pytest.raises(
        CheckpointError, match=r"model\.safetensors: unexpected tensor 'model\.layers\.0\.mlp\.extra\.weight'"
    ):
        _load(qwen3_copy)


def _shard(folder: Path) -> None:
    """Split the checkpoint into two shards with an index, as large checkpoints are stored."""
    tensors = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[: len(names) // 2],
        "model-00002-of-00002.safetensors": names[len(names) // 2 :],
    }
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, folder / shard, metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: shard for shard, keys in shards.items() for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def test_sharded_checkpoint_loads(qwen3_copy: Path, hf_checkpoints) -> None:  # type: ignore[no-untyped-def]
    _shard(qwen3_copy)
    model = zoo.from_pretrained(qwen3_copy, progress=False)
    hf_model, _ = hf_checkpoints["qwen3"]
    ids = torch.arange(10)[None]
    with torch.no_grad():
        assert (model(ids) - hf_model(ids).logits).abs().max().item() < 1e-4


def test_missing_shard(qwen3_copy: Path) -> None:
    _shard(qwen3_copy)
    (qwen3_copy / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model-00002-of-00002\.safetensors: missing shard .* tensor '[\w.]+'"):
        _load(qwen3_copy)


def test_unknown_model_type(qwen3_copy: Path) -> None:
    config = json.loads((qwen3_copy / "config.json").read_text())
    config["model_type"] = "qwen9"
    (qwen3_copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"config\.json: model_type: 'qwen9' is not supported"):
        _load(qwen3_copy)


def test_pickle_files_are_refused_not_loaded(qwen3_copy: Path) -> None:
    (qwen3_copy / "model.safetensors").unlink()
    (qwen3_copy / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin: pickle files are never loaded"):
        _load(qwen3_copy)


def test_tied_checkpoint_that_also_stores_lm_head_loads(qwen3_copy: Path, hf_checkpoints) -> None:  # type: ignore[no-untyped-def]
    _rewrite(qwen3_copy, lambda t: t.__setitem__("lm_head.weight", t["model.embed_tokens.weight"].clone()))
    model = zoo.from_pretrained(qwen3_copy, progress=False)
    assert model.lm_head.weight is model.embed.weight

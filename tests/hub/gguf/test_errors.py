"""Bad GGUF input: one CheckpointError line naming the architecture, type or tensor (exit 2
from the installed `zoo` command); and finding a GGUF by folder or by repo id + gguf_file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import zoo
from tests.hub.gguf.test_archs import make_model
from tests.hub.gguf.test_quants import tiny_qwen3
from tests.hub.gguf_files import gguf_tensors, write_gguf
from zoo.errors import CheckpointError

gguf = pytest.importorskip("gguf")
ZOO = str(Path(sys.executable).parent / "zoo")


def tiny_vocab(w: Any) -> None:
    """A tokenizer, so that `zoo generate` gets past its tokenizer check to the model's."""
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(["a", "b"])
    w.add_token_merges([])


def _zoo_generate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ZOO, "generate", "--weights", str(path), "hi", "--device", "cpu"], capture_output=True, text=True, timeout=120
    )


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zoo: error: "), result.stderr
    return lines[0]


def test_unknown_architecture_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(path), "mamba")
    tiny_vocab(w)
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    line = _one_line(_zoo_generate(path))
    assert "general.architecture: 'mamba' is not supported" in line and "allowed: gemma3, gpt-oss, llama" in line


def test_unreadable_quantization_type_is_one_line_naming_type_and_tensor(tmp_path: Path) -> None:
    model = tiny_qwen3()
    q8k = gguf.GGMLQuantizationType.Q8_K  # llama.cpp's activation type: gguf-py cannot dequantize it
    block, size = gguf.GGML_QUANT_SIZES[q8k]

    def encode(name: str, value: torch.Tensor):  # type: ignore[no-untyped-def]
        if name == "blk.0.ffn_up.weight":
            rows, cols = value.shape
            return np.zeros((rows, cols // block * size), dtype=np.uint8), q8k
        return value.numpy(), gguf.GGMLQuantizationType.F32

    path = write_gguf(tmp_path / "q8k.gguf", model, gguf_tensors(model), encode=encode, vocab=tiny_vocab)
    line = _one_line(_zoo_generate(path))
    assert "tensor 'blk.0.ffn_up.weight' has quantization type Q8_K, which zoo cannot read" in line


def test_not_a_gguf_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00 truncated")
    assert "not a readable GGUF file" in _one_line(_zoo_generate(path))


@pytest.fixture
def qwen3_tensors():  # type: ignore[no-untyped-def]
    model = make_model("qwen3")
    return model, gguf_tensors(model)


def test_missing_unexpected_and_misshapen_tensors(qwen3_tensors, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, tensors = qwen3_tensors
    missing = {k: v for k, v in tensors.items() if k != "blk.1.attn_k.weight"}
    with pytest.raises(
        CheckpointError,
        match=r"missing tensor 'blk.1.attn_k.weight' \(needed for zoo parameter "
        r"'layers.1.attention.k_proj.weight'\)",
    ):
        zoo.from_pretrained(write_gguf(tmp_path / "a.gguf", model, missing))
    with pytest.raises(CheckpointError, match="unexpected tensor 'blk.0.extra.weight'"):
        zoo.from_pretrained(write_gguf(tmp_path / "b.gguf", model, {**tensors, "blk.0.extra.weight": torch.ones(4)}))
    bad = {**tensors, "blk.0.ffn_up.weight": torch.ones(8, 64)}
    with pytest.raises(CheckpointError, match=r"tensor 'blk.0.ffn_up.weight' has shape \[8, 64\]"):
        zoo.from_pretrained(write_gguf(tmp_path / "c.gguf", model, bad))


def test_folder_with_several_ggufs_asks_for_one(qwen3_tensors, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, _ = qwen3_tensors
    write_gguf(tmp_path / "a.gguf", model)
    write_gguf(tmp_path / "b.gguf", model)
    with pytest.raises(CheckpointError, match=r"several GGUF files \(a.gguf, b.gguf\); name one with gguf_file="):
        zoo.from_pretrained(tmp_path)
    assert zoo.from_pretrained(tmp_path, gguf_file="b.gguf").hf_model_type == "qwen3"


def test_missing_gguf_library_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "any.gguf"
    path.write_bytes(b"GGUF")
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(CheckpointError, match=r"pip install zoo\[gguf\]"):
        zoo.from_pretrained(path)
    with pytest.raises(CheckpointError, match="no such GGUF file"):
        zoo.from_pretrained(tmp_path / "absent.gguf")


def test_repo_id_with_gguf_file_from_the_offline_hub_cache(qwen3_tensors, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import huggingface_hub.constants as hub_constants

    from tests.hub.test_loading import _hub_cache

    model, _ = qwen3_tensors
    files = tmp_path / "files"
    files.mkdir()
    write_gguf(files / "tiny-F32.gguf", model)
    _hub_cache(tmp_path / "home", "tiny-org/tiny-GGUF", files)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "home" / "hub"))
    loaded = zoo.from_pretrained("tiny-org/tiny-GGUF", gguf_file="tiny-F32.gguf", progress=False)
    ids = torch.arange(10)[None]
    with torch.no_grad():
        assert (loaded(ids) - model(ids).logits).abs().max().item() < 1e-4
    with pytest.raises(CheckpointError, match="not in the local Hugging Face cache"):
        zoo.from_pretrained("tiny-org/tiny-GGUF", gguf_file="other.gguf")


def test_generate_with_a_gguf_without_tokenizer_is_one_line(qwen3_tensors, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from zoo.cli import main

    model, _ = qwen3_tensors
    path = write_gguf(tmp_path / "bare.gguf", model)
    assert main(["generate", "--weights", str(path), "hi", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tokenizer.ggml.model: missing; this GGUF holds no tokenizer" in err[0]

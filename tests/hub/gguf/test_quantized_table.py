"""A GGUF stays quantized all the way: an 8-bit token table loads as int8 rows, shared with a
tied int8 head; the run computes in bfloat16 unless told otherwise; the row's weight bytes and
bytes read per decode step are the held ones; ``dequantize`` keeps the float behaviour.

References: the transformers model holding gguf-py's dequantization of the same file, and
byte counts written out by hand below."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from tests.conftest import tiny_spec
from tests.hub.gguf.test_quants import VOCAB, _hf_name, encoder
from tests.hub.gguf_files import gguf_tensors, write_gguf
from zoo.errors import BenchError
from zoo.quant import stored_bytes
from zoo.quant.linear import Int8Embedding, Int8Linear

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

RUN = {"prompt_len": 8, "gen_len": 4, "repeats": 1, "device": "cpu", "threads": 1}
D = 256
# tiny Qwen3, one layer: q, o, gate, up, down are 256 x 256; k, v 128 x 256 (2 KV heads of 64)
LINEAR_WEIGHTS = 5 * 256 * 256 + 2 * 128 * 256
LINEAR_ROWS = 5 * 256 + 2 * 128
NORMS = 256 + 256 + 64 + 64 + 256  # input, post-attention, q_norm, k_norm, final


def tiny_qwen3(tied: bool) -> Any:
    transformers.logging.set_verbosity_error()
    config = transformers.Qwen3Config(
        hidden_size=D,
        intermediate_size=D,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        tie_word_embeddings=tied,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def q8_file(tmp_path: Path, tied: bool) -> tuple[Path, Any]:
    """A Q8_0 GGUF and the transformers model holding gguf-py's dequantization of it."""
    hf_model = tiny_qwen3(tied)
    dequantized: dict[str, torch.Tensor] = {}
    path = write_gguf(
        tmp_path / f"q8-{'tied' if tied else 'untied'}.gguf",
        hf_model,
        gguf_tensors(hf_model),
        encode=encoder("Q8_0", dequantized),
    )
    names = list(hf_model.state_dict())
    hf_model.load_state_dict({_hf_name(g, names): t for g, t in dequantized.items()}, strict=False)
    return path, hf_model


def test_a_tied_q8_0_table_is_int8_rows_shared_with_the_int8_head(tmp_path: Path) -> None:
    path, hf_model = q8_file(tmp_path, tied=True)
    model = zoo.from_pretrained(path, dtype="float32", progress=False)
    assert isinstance(model.lm_head, Int8Linear) and model.embed.weight is None
    rows = model.embed.quantized_rows
    assert (
        isinstance(rows, Int8Embedding)
        and rows.qweight is model.lm_head.qweight
        and rows.scales is model.lm_head.scales
    )
    assert model.weights_layout == "Q8_0 -> int8 x8, int8 table (the head's); the rest float32"
    # int8 weights + a float32 scale per row, the table once (int8 + scale per token), float32 norms
    assert stored_bytes(model) == LINEAR_WEIGHTS + 4 * LINEAR_ROWS + VOCAB * D + 4 * VOCAB + 4 * NORMS
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got, reference = model(ids), hf_model(ids).logits
    error = (got - reference).abs().max().item() / reference.abs().max().item()
    assert 0 < error < 2e-2  # per-row int8 re-quantization of Q8_0's blocks of 32 (measured ~5e-3)


def test_an_untied_q8_0_table_is_int8_rows_of_its_own(tmp_path: Path) -> None:
    path, hf_model = q8_file(tmp_path, tied=False)
    model = zoo.from_pretrained(path, dtype="float32", progress=False)
    rows = model.embed.quantized_rows
    assert isinstance(rows, Int8Embedding) and rows.qweight is not model.lm_head.qweight
    assert model.weights_layout == "Q8_0 -> int8 x8, int8 table; the rest float32"
    ids = torch.randint(0, VOCAB, (1, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf_model.model.embed_tokens(ids)  # (1, 8, d)
        error = (rows(ids) - expected).abs().max().item() / expected.abs().max().item()
    assert 0 < error < 1e-2


def test_the_run_computes_in_bfloat16_and_reports_held_bytes(tmp_path: Path) -> None:
    path, hf_model = q8_file(tmp_path, tied=False)
    held = zoo.bench(weights=str(path), **RUN)
    floats = zoo.bench(weights=str(path), dequantize=True, **RUN)
    assert (
        held.environment.dtype == "bfloat16" and held.weights_dtype == "Q8_0 -> int8 x8, int8 table; the rest bfloat16"
    )
    assert floats.environment.dtype == "float32" and floats.weights_dtype == "Q8_0 -> float32"
    params = sum(p.numel() for p in hf_model.parameters())
    assert floats.weight_bytes == 4 * params
    table = VOCAB * D + 2 * VOCAB  # int8 rows and a bfloat16 scale per token
    head = VOCAB * D + 2 * VOCAB
    assert held.weight_bytes == LINEAR_WEIGHTS + 2 * LINEAR_ROWS + table + head + 2 * NORMS
    # a decode step reads every weight but the input table (only its looked-up rows), plus the same cache
    kv_read = floats.decode_bytes_per_step - (floats.weight_bytes - 4 * VOCAB * D)
    assert kv_read == 2 * 2 * 64 * 4 * (RUN["prompt_len"] + RUN["gen_len"] // 2)  # K and V, 2 heads of 64, float32
    assert held.decode_bytes_per_step == held.weight_bytes - table + kv_read // 2  # bfloat16 cache
    assert zoo.bench(weights=str(path), dtype="float32", **RUN).weights_dtype.endswith("the rest float32")


def test_bench_takes_a_loaded_model_or_a_path(tmp_path: Path) -> None:
    path, _ = q8_file(tmp_path, tied=True)
    by_path = zoo.bench(path, **RUN)  # a Path; a str ending in .gguf, a folder or org/name too
    assert by_path.config.weights == str(path) and by_path.environment.dtype == "bfloat16"
    assert zoo.bench(str(path), **RUN).weight_bytes == by_path.weight_bytes
    model = zoo.from_pretrained(path, dtype="bfloat16", progress=False)
    loaded = zoo.bench(model, **RUN)
    assert loaded.config.weights == str(path) and loaded.weights_dtype == by_path.weights_dtype
    assert loaded.weight_bytes == by_path.weight_bytes == stored_bytes(model)
    assert loaded.decode_bytes_per_step == by_path.decode_bytes_per_step
    with pytest.raises(BenchError, match="dtype: the model holds bfloat16, not float32"):
        zoo.bench(model, dtype="float32", **RUN)
    with pytest.raises(BenchError, match="weights_dtype: would change the given model in place"):
        zoo.bench(model, weights_dtype="int4", **RUN)
    built = zoo.bench(zoo.build(tiny_spec("llama-3.2-1b"), dtype="float32"), **RUN)  # random weights, built
    assert built.weights_dtype == "float32" and built.config.weights is None

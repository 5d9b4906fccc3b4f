"""Each phase's roofline, against counts written here, and the achieved fraction on the device
in hand (a known board's spec sheet; the CPU's measured peaks)."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.analysis.devices import device_peaks, gpu_peaks
from zoo.harness.phases import phases_for
from zoo.harness.phases.decode import Decode
from zoo.harness.phases.encode import Encode
from zoo.harness.phases.prefill import Prefill
from zoo.harness.prediction import prediction_columns
from zoo.harness.run_config import make_config

H100 = gpu_peaks("h100-sxm")  # 989.4 TFLOP/s bf16, 3350 GB/s
BF16 = torch.bfloat16


# Qwen3-0.6B counted by hand (its config.json): 28 layers, d 1024, 16 query and 8 key/value
# heads of 128, SwiGLU 3072, vocabulary 151936 tied; q/k norms and RMSNorms are weights only
QWEN3_ATTENTION = 1024 * 2048 + 2 * (1024 * 1024) + 2048 * 1024  # q, k, v, o
QWEN3_FFN = 3 * 1024 * 3072
QWEN3_PARAMS = 28 * (QWEN3_ATTENTION + QWEN3_FFN + 2 * 128 + 2 * 1024) + 151936 * 1024 + 1024  # 596,049,920
QWEN3_KV_PER_TOKEN = 28 * 2 * 8 * 128 * 2  # layers, K and V, heads, head_dim, bf16 bytes


def test_decode_roofline_is_bandwidth_over_bytes_read():
    spec = zoo.spec("qwen3-0.6b")
    config = make_config(prompt_len=1024, gen_len=2)
    line = Decode().predict(spec, config, H100, BF16)
    read = QWEN3_PARAMS * 2 + 1025 * QWEN3_KV_PER_TOKEN  # every weight once (tied: one table) + K/V at the midpoint
    assert QWEN3_PARAMS == 596_049_920 and line["bound"] == "memory" and line["bytes"] == read
    assert line["tokens_per_s"] == pytest.approx(3350e9 / read)
    prefill = Prefill().predict(spec, config, H100, BF16)
    assert prefill["bound"] == "compute"  # the LM head on the last row only, as zoo.model.generation.prefill does
    matmuls = 2 * 1024 * 28 * (QWEN3_ATTENTION + QWEN3_FFN)
    scores = 28 * 4 * 16 * 128 * (1024 * 1025 // 2)  # QK^T and AV, 2 FLOPs a product, causal: query i sees i keys
    head = 2 * 1024 * 151936  # the last row's logits
    assert prefill["tokens_per_s"] == pytest.approx(1024 / ((matmuls + scores + head) / 989.4e12))


def test_encoder_roofline_reads_its_weights_once_per_forward():
    """bert-base at batch 1 x 128 tokens: memory-bound, the weights the forward multiplies
    with (the untied token and token-type tables are lookups) read once, of the 512 position
    rows the 128 looked up, and not the pooler (768 x 768 + 768), which model(ids) does not
    run; at 64 x 512, compute-bound."""
    spec = zoo.spec("bert-base-uncased")
    line = Encode().predict(spec, make_config(prompt_len=128), H100, BF16)
    multiplied = 109_482_240 - (30522 + 2) * 768  # BertModel's published count less its token and type tables
    assert line["bound"] == "memory"
    read = multiplied - (768 * 768 + 768) - (512 - 128) * 768  # 128 of 512 position rows, no pooler
    assert line["tokens_per_s"] == pytest.approx(128 * 3350e9 / (read * 2))
    big = Encode().predict(spec, make_config(batch_size=64, prompt_len=512), H100, BF16)
    assert big["bound"] == "compute"
    d, ff, layers = 768, 3072, 12  # by hand: 2 FLOPs per weight and bias per token, plus QK^T and AV per layer
    per_layer = 2 * (4 * d * d + 2 * d * ff + 4 * d + ff + d) * 512 + 2 * 2 * 512 * 512 * d
    assert big["tokens_per_s"] == pytest.approx(64 * 512 / (64 * layers * per_layer / 989.4e12))


def test_encoder_decoder_roofline_reads_cross_kv_every_decode_step():
    spec = zoo.spec("t5-small")
    config = make_config(batch_size=8, prompt_len=512, gen_len=64)
    decode = Decode().predict(spec, config, H100, BF16)
    d, ff, layers, vocab = 512, 2048, 6, 32128  # t5-small, by hand, bfloat16 (2 bytes)
    # per decoder layer: self q, k, v, o and cross q, o (cross K/V are projected once per prompt), the
    # ReLU FFN, three norms; the final norm, the relative-position table (32 x 8), the tied head
    weights = 2 * (layers * (6 * d * d + 2 * d * ff + 3 * d) + d + 32 * 8 + vocab * d)
    cache = 2 * layers * 2 * 8 * (8 * 64 * 33 + 512 * 512)  # self K/V at the midpoint 1 + 64 // 2, cross K/V of 512
    read = weights + cache
    assert decode["bound"] == "memory" and decode["tokens_per_s"] == pytest.approx(8 * 3350e9 / read)
    encode = Encode().predict(spec, config, H100, BF16)
    assert encode["bound"] == "compute"
    flops = 8 * layers * (2 * (4 * d * d + 2 * d * ff) * 512 + 2 * 2 * 512 * 512 * d)  # no biases in T5
    assert encode["tokens_per_s"] == pytest.approx(8 * 512 / (flops / 989.4e12))
    columns = prediction_columns(
        spec,
        make_config(**{**config.model_dump(), "predict": "h100-sxm"}),
        phases_for("encoder-decoder", config),
        BF16,
        torch.device("cpu"),
        "a CPU",
    )
    assert (
        columns["predicted_bound"]
        == f"encoder: compute, prefill: {Prefill().predict(spec, config, H100, BF16)['bound']}, decode: memory"
    )


def test_fractions_divide_by_the_roofline_of_the_device_in_hand():
    """Measured on an H100 (by name), whatever --predict names: the fraction is of the H100's
    spec sheet; on the CPU, of its measured peaks; on MPS there are none, so no fraction."""
    spec = zoo.spec("qwen3-0.6b")
    config = make_config(prompt_len=128, gen_len=16, predict="l4")
    phases = phases_for("decoder", config)
    measured = {"prefill_tokens_per_s": 1000.0, "decode_tokens_per_s": 100.0}
    on_h100 = prediction_columns(spec, config, phases, BF16, torch.device("cuda"), "NVIDIA H100 80GB HBM3", measured)
    h100_decode = Decode().predict(spec, config, H100, BF16)["tokens_per_s"]
    assert on_h100["roofline_source"] == "spec sheet h100-sxm" and on_h100["predicted_gpu"] == "l4"
    assert on_h100["decode_roofline_fraction"] == pytest.approx(100.0 / h100_decode)
    assert on_h100["predicted_decode_tokens_per_s"] == pytest.approx(
        Decode().predict(spec, config, gpu_peaks("l4"), BF16)["tokens_per_s"]
    )
    on_cpu = prediction_columns(spec, config, phases, BF16, torch.device("cpu"), "Intel(R) Xeon(R)", measured)
    assert on_cpu["roofline_source"].startswith("measured host (")  # the fixed peaks of tests/conftest.py
    assert on_cpu["decode_roofline_fraction"] == pytest.approx(
        100.0 / Decode().predict(spec, config, device_peaks("cpu", ""), BF16)["tokens_per_s"]
    )
    assert "roofline_source" not in prediction_columns(
        spec, config, phases, BF16, torch.device("mps"), "Apple M2", measured
    )

import pytest
import torch

import zoo
from zoo.errors import BenchError
from zoo.analysis.devices import GPUS, gpu, matches_device, roofline


def test_the_table_covers_the_required_gpus_with_sources():
    for key in ("h100-sxm", "h100-pcie", "h200", "a100-80gb", "l4", "rtx-4090"):
        row = GPUS[key]
        assert row.source.startswith("https://") and row.bf16_tflops > 0 and row.memory_gb_s > 0


def test_unknown_gpu_is_a_bench_error_with_a_suggestion():
    with pytest.raises(BenchError, match="did you mean 'h100-sxm'"):
        gpu("h100-sx")


def test_device_names_map_to_rows():
    assert matches_device(GPUS["h100-sxm"], "NVIDIA H100 80GB HBM3")
    assert matches_device(GPUS["h100-pcie"], "NVIDIA H100 PCIe")
    assert not matches_device(GPUS["h100-sxm"], "NVIDIA H100 PCIe")
    assert matches_device(GPUS["rtx-4090"], "NVIDIA GeForce RTX 4090")
    assert matches_device(GPUS["l4"], "NVIDIA L4")
    assert not matches_device(GPUS["l4"], "NVIDIA L40S") and not matches_device(GPUS["l4"], "NVIDIA L40")
    assert matches_device(GPUS["a100-80gb"], "NVIDIA A100-SXM4-80GB")
    assert not matches_device(GPUS["a100-80gb"], "NVIDIA A100 80GB PCIe")


def test_decode_roofline_is_bandwidth_over_bytes_read():
    spec = zoo.spec("qwen3-0.6b")
    line = roofline(spec, "h100-sxm", batch_size=1, prompt_len=1024, gen_len=2, dtype=torch.bfloat16)
    read = zoo.count_params(spec).active * 2 + zoo.kv_cache_bytes(spec, 1, 1025, dtype="bfloat16")
    assert line.decode_bound == "memory"
    assert line.decode_tokens_per_s == pytest.approx(3350e9 / read)
    assert line.prefill_bound == "compute"
    from zoo.analysis.counts import forward_flops

    # prefill runs the LM head on the last row only (as zoo.model.generation.prefill does)
    assert line.prefill_tokens_per_s == pytest.approx(1024 / (forward_flops(spec, 1024, 1024, last_only=True) / 989.4e12))


def test_encoder_roofline_reads_its_weights_once_per_forward():
    """bert-base at batch 1 x 128 tokens on an H100: memory-bound, the weights the forward
    multiplies with (the untied token table is a lookup) read once."""
    from zoo.analysis.devices import encoder_roofline

    spec = zoo.spec("bert-base-uncased")
    line = encoder_roofline(spec, "h100-sxm", batch_size=1, prompt_len=128, gen_len=16, dtype=torch.bfloat16)
    count = zoo.count_params(spec)
    assert line.encoder_bound == "memory" and line.decode_tokens_per_s is None
    assert line.encoder_tokens_per_s == pytest.approx(128 * 3350e9 / ((count.total - count.embedding) * 2))
    big = encoder_roofline(spec, "h100-sxm", batch_size=64, prompt_len=512, gen_len=16, dtype=torch.bfloat16)
    from zoo.analysis.counts import forward_flops

    assert big.encoder_bound == "compute"
    assert big.encoder_tokens_per_s == pytest.approx(64 * 512 / (forward_flops(spec, 512, 512, 64) / 989.4e12))


def test_encoder_decoder_roofline_reads_cross_kv_every_decode_step():
    from zoo.analysis.counts import cache_bytes, encoder_flops, weight_bytes_read
    from zoo.analysis.devices import encoder_roofline

    spec = zoo.spec("t5-small")
    line = encoder_roofline(spec, "h100-sxm", batch_size=8, prompt_len=512, gen_len=64, dtype=torch.bfloat16)
    decode_read = weight_bytes_read(spec, 8, "bfloat16") + cache_bytes(spec, 8, 33, 512, "bfloat16").total
    assert line.decode_bound == "memory" and line.decode_tokens_per_s == pytest.approx(8 * 3350e9 / decode_read)
    assert cache_bytes(spec, 8, 33, 512, "bfloat16").memory > cache_bytes(spec, 8, 33, 512, "bfloat16").token
    assert line.encoder_bound == "compute"
    assert line.encoder_tokens_per_s == pytest.approx(8 * 512 / (encoder_flops(spec, 512, 8) / 989.4e12))
    assert line.bound == f"encoder: compute, decoder prefill: {line.decoder_prefill_bound}, decode: memory"

"""One Row schema: rows logged by older versions (a decoder's Measurement, an encoder's
EncoderMeasurement naming its family) are read as it."""

from __future__ import annotations

import json

from tests.conftest import tiny_spec
from zoo.harness.report.tables import append_result, read_rows
from zoo.harness.row import Row

ENVIRONMENT = {
    "torch_version": "2.11.0",
    "python_version": "3.11.7",
    "device": "cpu",
    "device_name": "x86",
    "dtype": "float32",
    "sdpa_backend": "math",
    "compile_mode": "none",
    "threads": 2,
    "zoo_commit": None,
}
CONFIG = {"device": "cpu", "batch_size": 1, "prompt_len": 8, "gen_len": 4, "repeats": 1}
OLD_DECODER = {  # a Measurement line as zoo bench wrote it before topologies were named
    "arch": "gpt2",
    "config": CONFIG,
    "params_total": 10,
    "params_active": 10,
    "params_embedding": 4,
    "params_unembedding": 0,
    "weight_bytes": 40,
    "weights_dtype": "float32",
    "kv_bytes_per_token": 8,
    "state_bytes": 0,
    "kv_bytes": 96,
    "context_len": 12,
    "prefill_peak_bytes": 100,
    "decode_peak_bytes": 101,
    "memory_method": "rss",
    "prefill_tokens_per_s": 5.0,
    "prefill_tokens_per_s_min": 5.0,
    "prefill_tokens_per_s_max": 5.0,
    "decode_tokens_per_s": 2.0,
    "decode_tokens_per_s_min": 2.0,
    "decode_tokens_per_s_max": 2.0,
    "decode_tokens_per_s_runs": [2.0],
    "time_to_first_token_s": 0.2,
    "flops_per_token": 20,
    "decode_bytes_per_step": 48,
    "environment": ENVIRONMENT,
    "timestamp": "2026-01-01T00:00:00+00:00",
}
OLD_ENCODER_DECODER = {  # an EncoderMeasurement line
    "arch": "t5-small",
    "family": "encoder-decoder",
    "config": CONFIG,
    "params_total": 20,
    "weight_bytes": 80,
    "seq_len": 8,
    "encoder_tokens_per_s": 9.0,
    "encoder_tokens_per_s_min": 9.0,
    "encoder_tokens_per_s_max": 9.0,
    "encoder_time_s": 0.9,
    "peak_bytes": 200,
    "memory_method": "rss",
    "encoder_flops": 30,
    "decoder_prefill_tokens_per_s": 3.0,
    "decode_tokens_per_s": 4.0,
    "self_kv_bytes": 16,
    "cross_kv_bytes": 32,
    "predicted_gpu": "h100-sxm",
    "predicted_decoder_prefill_tokens_per_s": 7.0,
    "environment": ENVIRONMENT,
    "timestamp": "2026-01-01T00:00:00+00:00",
}


def test_old_rows_read_as_rows():
    decoder = Row.model_validate(OLD_DECODER)
    assert decoder.topology == "decoder" and decoder.decode_tokens_per_s == 2.0 and decoder.itl_p50_s is None
    seq2seq = Row.model_validate(OLD_ENCODER_DECODER)
    assert seq2seq.topology == "encoder-decoder" and seq2seq.prefill_tokens_per_s == 3.0
    assert seq2seq.predicted_prefill_tokens_per_s == 7.0 and seq2seq.cross_kv_bytes == 32 and seq2seq.kv_bytes is None


def test_a_new_row_appends_to_a_log_of_old_rows(tmp_path):
    import zoo

    (tmp_path / "bench.jsonl").write_text(json.dumps(OLD_DECODER) + "\n" + json.dumps(OLD_ENCODER_DECODER) + "\n")
    row = zoo.bench(tiny_spec("gpt2"), device="cpu", prompt_len=4, gen_len=3, repeats=1)
    append_result(row, tmp_path)
    assert [r.get("topology", r.get("family")) for r in read_rows(tmp_path / "bench.jsonl")] == [
        None,
        "encoder-decoder",
        "decoder",
    ]
    csv = (tmp_path / "bench.csv").read_text().splitlines()
    header = csv[0].split(",")
    assert len(csv) == 4 and "topology" in header and "family" not in header and "itl_p99_s" in header
    assert [line.split(",")[header.index("topology")] for line in csv[1:]] == ["decoder", "encoder-decoder", "decoder"]
    assert "| topology |" in (tmp_path / "bench.md").read_text().splitlines()[0]

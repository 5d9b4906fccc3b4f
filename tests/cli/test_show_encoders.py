"""`zoo show` of encoders and encoder-decoders: every figure equals zoo.analysis.counts (and the
hand count), in YAML comments and in --json alike."""

import json

import pytest
import yaml

from zoo.analysis.counts import cache_bytes, count_params
from zoo.analysis.published import ACTIVE_CONVENTION
from zoo.cli import main


def _show(arch: str, capsys) -> tuple[dict, dict]:  # type: ignore[no-untyped-def]
    """The analysis as --json gives it and as the YAML comments give it."""
    assert main(["show", arch, "--format", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)["analysis"]
    assert main(["show", arch]) == 0
    text = capsys.readouterr().out.split("# --- analysis")[1].split("\n", 1)[1]
    as_yaml = yaml.safe_load("\n".join(line.removeprefix("# ") for line in text.splitlines()))
    return as_json, as_yaml


# self K/V per decoder token = 2 (K, V) x decoder layers x d_model x 2 bytes (bf16); cross K/V
# per encoder token the same (every decoder layer attends to the encoder output)
@pytest.mark.parametrize(
    "arch,per_token_bf16,max_seq_len",
    [
        ("t5-small", 2 * 6 * 8 * 64 * 2, 512),
        ("bart-base", 2 * 6 * 768 * 2, 1024),
    ],
)
def test_encoder_decoder_figures_equal_the_analysis(arch, per_token_bf16, max_seq_len, capsys):  # type: ignore[no-untyped-def]
    as_json, as_yaml = _show(arch, capsys)
    assert as_json == as_yaml and as_json["topology"] == "encoder-decoder"
    count = count_params(arch)
    assert as_json["params"] == {
        "total": count.total,
        "active": count.active,
        "active_counts": ACTIVE_CONVENTION,
        "active_with_embedding": count.active_with_embedding,
        "embedding": count.embedding,
        "unembedding": count.unembedding,
        "by_component": count.by_component,
    }
    for dtype, size in (("bfloat16", 1), ("float32", 2)):
        per = cache_bytes(arch, 1, 1, 1, dtype=dtype)
        assert as_json["kv_bytes_per_token"][dtype] == per.token == per_token_bf16 * size
        assert as_json["cross_kv_bytes_per_encoder_token"][dtype] == per.memory == per_token_bf16 * size
        assert as_json["state_bytes_per_sequence"][dtype] == per.sequence == 0  # relative / learned positions: no state
    at_max = cache_bytes(arch, 1, max_seq_len, max_seq_len, dtype="bfloat16").total
    assert as_json["kv_cache_bytes_at_max_seq_len_bf16"] == at_max == 2 * max_seq_len * per_token_bf16
    assert as_json["kv_cache_at_max_seq_len_holds"] == (
        f"self K/V of {max_seq_len} decoder tokens + cross K/V of {max_seq_len} encoder tokens"
    )


def test_an_encoder_shows_no_cache(capsys):  # type: ignore[no-untyped-def]
    as_json, as_yaml = _show("bert-base-uncased", capsys)
    assert as_json == as_yaml and as_json["params"]["total"] == 109_482_240
    assert as_json["kv_bytes_per_token"] is None and as_json["kv_cache_bytes_at_max_seq_len_bf16"] is None
    assert "cross_kv_bytes_per_encoder_token" not in as_json and as_json["cache"].startswith("none")

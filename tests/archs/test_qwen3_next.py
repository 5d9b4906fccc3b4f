"""qwen3-next-80b-a3b: exact counts from the config, the published 80B total / 3B active."""

from __future__ import annotations

import zoo

D, VOCAB, LAYERS, DELTANET, ATTENTION = 2048, 151936, 48, 36, 12


def _closed_form() -> tuple[int, int]:
    """Total and active parameters from the config's numbers alone."""
    key, value = 16 * 128, 32 * 128
    deltanet = D * (2 * key + 2 * value) + D * 2 * 32 + (2 * key + value) * 4 + 2 * 32 + 128 + value * D
    attention = D * 16 * 256 * 2 + 2 * D * 2 * 256 + 16 * 256 * D + 2 * 256
    expert, shared = 3 * D * 512, 3 * D * 512 + D
    router = 512 * D
    moe_total, moe_active = router + 512 * expert + shared, router + 10 * expert + shared
    common = 2 * D  # the two norms of each layer
    mixers = DELTANET * deltanet + ATTENTION * attention
    total = 2 * VOCAB * D + D + mixers + LAYERS * (moe_total + common)
    active = VOCAB * D + D + mixers + LAYERS * (moe_active + common)  # unembedding counted, embedding not
    return total, active


def test_counts_match_the_closed_form_and_the_published_sizes():
    count = zoo.count_params(zoo.spec("qwen3-next-80b-a3b"))
    total, active = _closed_form()
    assert (count.total, count.active) == (total, active) == (79_674_391_296, 3_563_764_480)
    assert round(count.total / 1e9) == 80  # "80B total"
    assert round((count.active - count.unembedding) / 1e9) == 3  # "3B active" (non-embedding)


def test_three_deltanet_layers_to_one_gated_attention_layer():
    spec = zoo.spec("qwen3-next-80b-a3b")
    kinds = [spec.layer(i).attention.kind for i in range(spec.n_layers)]
    assert kinds == ["gated_deltanet"] * 3 + ["gqa"] + kinds[4:] and kinds.count("gqa") == ATTENTION
    assert all(spec.layer(i).positional.kind == ("rope" if i % 4 == 3 else "none") for i in range(spec.n_layers))

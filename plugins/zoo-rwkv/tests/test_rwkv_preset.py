"""The rwkv-4-169m-pile preset (its exact parameter count against the closed form) and config keys."""

from __future__ import annotations

from rwkv_helpers import deterministic  # noqa: F401 (fixture; stages the plugin)

import zoo


def closed_form(V: int, d: int, C: int, H: int, L: int) -> int:
    """Embedding and untied head (V·d each), pre_ln and ln_out (2d each), and per layer:
    ln1, ln2 (4d); time mix: time_decay, time_first (2C), three mixing ratios (3d), key,
    value, receptance (3·d·C) and output (C·d); channel mix: two ratios (2d), key (d·H),
    receptance (d·d), value (H·d)."""
    per_layer = 4 * d + (2 * C + 3 * d + 4 * d * C) + (2 * d + 2 * d * H + d * d)
    return 2 * V * d + 2 * 2 * d + L * per_layer


def test_rwkv_4_169m_pile_count():
    spec = zoo.spec("rwkv-4-169m-pile")
    count = zoo.count_params(spec).total
    assert count == closed_form(V=50277, d=768, C=768, H=3072, L=12) == 169_342_464  # published: 169M
    assert round(count / 1e6) == 169


def test_rwkv_4_169m_pile_state_is_per_sequence():
    spec = zoo.spec("rwkv-4-169m-pile")
    assert zoo.kv_bytes_per_token(spec) == 0
    # per layer att_x and ffn_x (768 each, bf16) and num, den, max (768 each, float32)
    assert zoo.state_bytes(spec) == 12 * (2 * 768 * 2 + 3 * 768 * 4) == 147_456


def test_config_keys_zoo_cannot_honour_are_errors_naming_them():
    import pytest

    from zoo.errors import CheckpointError

    base = {"model_type": "rwkv", "vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2}
    assert zoo.ModelSpec.from_hf_config(base).block.rescale_every == 6  # transformers' default
    with pytest.raises(CheckpointError, match="layer_norm_epsilon.*1e-5"):
        zoo.ModelSpec.from_hf_config({**base, "layer_norm_epsilon": 1e-6})
    with pytest.raises(CheckpointError, match="unknown_switch"):
        zoo.ModelSpec.from_hf_config({**base, "unknown_switch": True})
    with pytest.raises(CheckpointError, match="rescale_every"):
        zoo.ModelSpec.from_hf_config({**base, "rescale_every": -1})

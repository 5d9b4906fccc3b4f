"""MQAR data follows Zoology's definition."""

from __future__ import annotations

import torch

from zoo.training.mqar import MQARSetting, mqar


def test_queries_are_keys_shown_and_answers_their_values() -> None:
    setting = MQARSetting(vocab_size=256, seq_len=64, num_kv_pairs=8)
    inputs, labels = mqar(setting, 50, seed=0)
    assert inputs.shape == labels.shape == (50, 64)
    for x, y in zip(inputs, labels):
        keys, values = x[0:16:2], x[1:16:2]
        assert bool((keys >= 1).all() and (keys < 128).all() and (values >= 128).all())
        assert len(set(keys.tolist())) == 8
        pairs = dict(zip(keys.tolist(), values.tolist()))
        asked = (y != -100).nonzero().flatten()
        assert len(asked) == 8  # every key queried once
        assert bool((asked >= 16).all())  # queries only after the pairs
        assert {int(x[i]) for i in asked} == set(pairs)
        assert all(int(y[i]) == pairs[int(x[i])] for i in asked)


def test_seeded_and_different_per_seed() -> None:
    setting = MQARSetting(vocab_size=256, seq_len=64, num_kv_pairs=4)
    a, b, c = mqar(setting, 10, 1), mqar(setting, 10, 1), mqar(setting, 10, 2)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])

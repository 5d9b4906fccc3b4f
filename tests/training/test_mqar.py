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


def test_probe_cli_trains_variants_in_parallel_and_writes_the_table(tmp_path, capsys) -> None:
    from zoo.cli import main

    code = main(["probe", "mqar", "--arch", "llama-3.2-1b", "--set", "n_layers=1", "--set", "d_model=32",
                 "--set", "attention.n_heads=2", "--set", "attention.n_kv_heads=2", "--set", "attention.head_dim=16",
                 "--set", "ffn.hidden=64", "--variant", "gqa:attention.kind=gqa", "--variant", "lin:attention.kind=linear",
                 "--pairs", "4", "--seq-len", "32", "--vocab", "64", "--steps", "2", "--batch-size", "4",
                 "--train-examples", "16", "--threads", "1", "--jobs", "2", "--out", str(tmp_path), "--name", "t"])
    assert code == 0
    table = (tmp_path / "mqar-t.md").read_text().splitlines()
    assert [row.split("|")[1].strip() for row in table[2:]] == ["gqa", "lin"]  # task order, whichever finished first
    assert (tmp_path / "mqar-t.png").is_file() and "pairs=4" in capsys.readouterr().out

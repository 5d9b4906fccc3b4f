"""MQAR data follows Zoology's definition."""

from __future__ import annotations

import torch

from zoo.training.mqar import MQARSetting, mqar


def _check_paper_definition(x: torch.Tensor, y: torch.Tensor, pairs: int, vocab: int) -> None:
    """Zoology (Arora et al. 2023), section 3 and appendix: a sequence opens with ``pairs``
    key-value pairs (k_1, v_1, ..., k_N, v_N), keys from one half of the vocabulary and values
    from the other, keys distinct so each has one answer; then each key is queried once, later
    in the sequence, and the target at a query is the value paired with that key. Nothing else
    is scored. Labels are next-token targets: the label at position t is for input t."""
    context = 2 * pairs
    keys, values = x[0:context:2].tolist(), x[1:context:2].tolist()
    assert all(1 <= k < vocab // 2 for k in keys) and all(vocab // 2 <= v < vocab for v in values)
    assert len(set(keys)) == pairs and len(set(values)) == pairs
    answer = dict(zip(keys, values))
    asked = (y != -100).nonzero().flatten().tolist()
    assert len(asked) == pairs  # every key queried exactly once
    assert all(i >= context for i in asked)  # queries only after the pairs are shown
    assert sorted(int(x[i]) for i in asked) == sorted(keys)  # only keys shown are queried
    assert all(int(y[i]) == answer[int(x[i])] for i in asked)  # the answer is the paired value


def test_queries_are_keys_shown_and_answers_their_values() -> None:
    for pairs, seq_len in ((8, 64), (4, 64), (16, 128), (32, 128)):
        setting = MQARSetting(vocab_size=256, seq_len=seq_len, num_kv_pairs=pairs)
        inputs, labels = mqar(setting, 40, seed=pairs)
        assert inputs.shape == labels.shape == (40, seq_len)
        for x, y in zip(inputs, labels):
            _check_paper_definition(x, y, pairs, 256)


def test_without_random_filler_the_other_slots_are_blank() -> None:
    """Figure 2's configs (random_non_queries=False): every slot after the pairs that is not a
    query holds the blank token 0, so no filler can repeat a key."""
    setting = MQARSetting(vocab_size=256, seq_len=64, num_kv_pairs=8, random_non_queries=False)
    inputs, labels = mqar(setting, 40, seed=3)
    for x, y in zip(inputs, labels):
        _check_paper_definition(x, y, 8, 256)
        rest = torch.ones(64, dtype=torch.bool)
        rest[:16] = False
        rest[(y != -100).nonzero().flatten()] = False
        assert bool((x[rest] == 0).all())


def test_query_gaps_follow_the_power_law() -> None:
    """Gaps are drawn with p(g) proportional to g^(a-1): with a = 0.01 most queries come soon after
    the pairs; a = 1 is uniform over the even slots."""

    def mean_offset(power_a: float) -> float:
        setting = MQARSetting(vocab_size=256, seq_len=128, num_kv_pairs=4, power_a=power_a, random_non_queries=False)
        _, labels = mqar(setting, 400, seed=0)
        asked = (labels != -100).nonzero()[:, 1].float() - 8  # offset after the pairs
        assert bool((asked % 2 == 0).all())  # queries sit at even offsets, as in Zoology
        return float(asked.mean())

    assert mean_offset(0.01) < 0.6 * mean_offset(1.0)
    assert abs(mean_offset(1.0) - 60) < 6  # uniform over offsets 0, 2, ..., 118: mean 59


def test_seeded_and_different_per_seed() -> None:
    setting = MQARSetting(vocab_size=256, seq_len=64, num_kv_pairs=4)
    a, b, c = mqar(setting, 10, 1), mqar(setting, 10, 1), mqar(setting, 10, 2)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])


def test_probe_cli_trains_variants_in_parallel_and_writes_the_table(tmp_path, capsys) -> None:
    from zoo.cli import main

    code = main(
        [
            "probe",
            "mqar",
            "--arch",
            "llama-3.2-1b",
            "--set",
            "n_layers=1",
            "--set",
            "d_model=32",
            "--set",
            "attention.n_heads=2",
            "--set",
            "attention.n_kv_heads=2",
            "--set",
            "attention.head_dim=16",
            "--set",
            "ffn.hidden=64",
            "--variant",
            "gqa:attention.kind=gqa",
            "--variant",
            "lin:attention.kind=linear",
            "--pairs",
            "4",
            "--seq-len",
            "32",
            "--vocab",
            "64",
            "--steps",
            "2",
            "--batch-size",
            "4",
            "--train-examples",
            "16",
            "--threads",
            "1",
            "--jobs",
            "2",
            "--out",
            str(tmp_path),
            "--name",
            "t",
        ]
    )
    assert code == 0
    table = (tmp_path / "mqar-t.md").read_text().splitlines()
    assert [row.split("|")[1].strip() for row in table[2:]] == ["gqa", "lin"]  # task order, whichever finished first
    assert (tmp_path / "mqar-t.png").is_file() and "pairs=4" in capsys.readouterr().out


def test_probe_cli_merges_runs_a_rerun_row_replacing_the_earlier_one(tmp_path) -> None:
    """--from-jsonl trains nothing: one table and plot from several runs, a later file's row for
    the same variant and pair count replacing the earlier one (one variant rerun)."""
    import json

    from zoo.cli import main

    def row(variant: str, pairs: int, accuracy: float) -> dict[str, object]:
        return {
            "variant": variant,
            "attention": variant,
            "params": 10,
            "state_bytes_per_sequence": 100 + len(variant),
            "num_kv_pairs": pairs,
            "seq_len": 64,
            "steps": 5,
            "final_loss": 1.0,
            "accuracy": accuracy,
            "seconds": 1.0,
        }

    first, rerun = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps(row(v, p, 0.1)) + "\n" for p in (4, 8) for v in ("mha", "gdn", "lin")))
    rerun.write_text("".join(json.dumps(row("gdn", p, 0.9)) + "\n" for p in (4, 8)))
    code = main(
        ["probe", "mqar", "--from-jsonl", str(first), "--from-jsonl", str(rerun), "--out", str(tmp_path), "--name", "m"]
    )
    assert code == 0
    table = (tmp_path / "mqar-m.md").read_text().splitlines()[2:]
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in table]
    assert [(c[0], c[4], c[-1]) for c in cells] == [
        ("mha", "4", "0.100"),
        ("gdn", "4", "0.900"),
        ("lin", "4", "0.100"),
        ("mha", "8", "0.100"),
        ("gdn", "8", "0.900"),
        ("lin", "8", "0.100"),
    ]
    assert len((tmp_path / "mqar-m.jsonl").read_text().splitlines()) == 6
    assert (tmp_path / "mqar-m.png").is_file()

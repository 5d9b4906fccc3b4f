"""The train_run phase (``zoo compare --train-tokens N --train-text FILE``): each variant trained
from scratch, its held-out loss in the row beside its cost; a checkpoint per variant, so an
interrupted run resumes where it stopped and a finished one is read back."""

from __future__ import annotations

import json

import pytest

import zoo
from zoo.errors import BenchError
from zoo.harness.phases import train_run
from zoo.training.step import Trainer

TINY = {
    "n_layers": 2,
    "d_model": 32,
    "attention.n_heads": 4,
    "attention.n_kv_heads": 2,
    "attention.head_dim": 8,
    "ffn.hidden": 64,
    "vocab_size": 256,
}
RUN = {"prompt_len": 16, "gen_len": 3, "repeats": 1, "threads": 1, "train_batch_size": 2}


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("def f(x):\n    return x + 1\n\nclass A:\n    pass\n" * 120)
    return path


def test_compare_puts_held_out_loss_beside_kv_bytes(tmp_path, text, capsys):
    from zoo.cli import main

    sets = [a for k, v in TINY.items() if k != "attention.n_kv_heads" for a in ("--set", f"{k}={v}")]
    variants = "attention={kind: gqa, n_kv_heads: 2},{kind: mqa}"
    code = main(
        [
            "compare",
            "--arch",
            "llama-3.2-1b",
            *sets,
            "--vary",
            variants,
            "--train-tokens",
            "256",
            "--train-text",
            str(text),
            "--train-dir",
            str(tmp_path / "runs"),
            "--prompt-len",
            "16",
            "--gen-len",
            "3",
            "--repeats",
            "1",
            "--threads",
            "1",
            "--format",
            "json",
        ]
    )
    assert code == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["status"] for r in rows] == ["ok", "ok"]
    for row in rows:
        assert row["train_tokenizer"] == "bytes" and row["kv_bytes_per_token"] > 0
        assert 0 < row["train_held_out_loss"] < 10 and row["train_perplexity"] > 1
        assert row["train_run_tokens"] == 256 and row["train_run_tokens_per_s"] > 0  # 8 steps of 2 rows of 16
    assert rows[0]["kv_bytes_per_token"] == 2 * rows[1]["kv_bytes_per_token"]  # 2 K/V heads against 1
    assert len(list((tmp_path / "runs").glob("*/checkpoint.safetensors"))) == 2


def test_an_interrupted_run_resumes_from_its_checkpoint_to_the_same_result(tmp_path, text, monkeypatch):
    spec = zoo.spec("llama-3.2-1b").override(TINY)
    options = {**RUN, "train_tokens": 32 * 6, "train_text": str(text)}  # 6 steps
    whole = zoo.bench(spec, **options, train_dir=str(tmp_path / "whole"))
    assert whole.train_run_start_step == 0 and len(whole.train_curve) == 6

    monkeypatch.setattr(train_run, "CHECKPOINT_EVERY", 2)
    real_step, calls = Trainer.step, []

    def interrupted(self, batch):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real_step(self, batch)

    monkeypatch.setattr(Trainer, "step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        zoo.bench(spec, **options, train_dir=str(tmp_path / "part"))
    monkeypatch.setattr(Trainer, "step", real_step)
    resumed = zoo.bench(spec, **options, train_dir=str(tmp_path / "part"))
    assert resumed.train_run_start_step == 4  # the checkpoint after step 4; step 5 was lost
    assert resumed.train_held_out_loss == whole.train_held_out_loss and resumed.train_curve == whole.train_curve
    again = zoo.bench(spec, **options, train_dir=str(tmp_path / "part"))
    assert again.train_run_start_step == 6 and again.train_held_out_loss == whole.train_held_out_loss  # read back


def test_a_token_budget_needs_a_text_and_trains_from_scratch_only(text):
    with pytest.raises(BenchError, match="train_tokens and train_text"):
        zoo.bench(zoo.spec("llama-3.2-1b").override(TINY), **RUN, train_tokens=64)
    with pytest.raises(BenchError, match="zoo train --weights"):
        zoo.bench(None, weights="some/checkpoint", train_tokens=64, train_text=str(text))

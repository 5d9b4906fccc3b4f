"""`zoo generate` with a checkpoint folder made here; zoo.hub's loading is stubbed until it
is merged (the end-to-end test through zoo.hub belongs with it)."""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

import zoo
from tests.generation_checks import _one_thread  # noqa: F401 (autouse fixture)
from tests.model.test_generation import VOCAB, grid_model
from zoo.cli import generate as generate_cli
from zoo.cli import main

WORDS = [f"w{i}" for i in range(VOCAB)]


@pytest.fixture
def checkpoint(tmp_path, monkeypatch):
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    model = grid_model("gqa", None, False, False, "rope", "swiglu")
    monkeypatch.setattr(generate_cli, "load_checkpoint", lambda weights, revision, dtype, device, gguf_file=None: (model, tmp_path))
    return tmp_path, model


SAMPLING = ["--max-new-tokens", "6", "--temperature", "3", "--seed", "1"]


def _expected(model):
    return zoo.generate(model, torch.tensor([[5, 9, 2]]), max_new_tokens=6, temperature=3.0, seed=1)[0, 3:].tolist()


def test_generate_streams_the_sampled_continuation(checkpoint, capsys):
    folder, model = checkpoint
    assert main(["generate", "--weights", str(folder), "w5 w9 w2", *SAMPLING]) == 0
    expected = _expected(model)
    assert len(set(expected)) > 2
    assert capsys.readouterr().out == "w5 w9 w2" + "".join(" " + WORDS[t] for t in expected) + "\n"


def test_generate_stops_at_the_checkpoints_eos(checkpoint, capsys):
    folder, model = checkpoint
    expected = _expected(model)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [expected[2]]}))
    assert main(["generate", "--weights", str(folder), "w5 w9 w2", *SAMPLING]) == 0
    cut = expected.index(expected[2])
    assert capsys.readouterr().out == "w5 w9 w2" + "".join(" " + WORDS[t] for t in expected[:cut]) + "\n"


def test_bad_sampling_values_are_one_line_errors(checkpoint, capsys):
    folder, _ = checkpoint
    assert main(["generate", "--weights", str(folder), "w1", "--top-p", "0"]) == 2
    assert capsys.readouterr().err.startswith("zoo: error: top_p")


def test_a_missing_tokenizer_is_a_checkpoint_error(checkpoint, capsys):
    folder, _ = checkpoint
    (folder / "tokenizer.json").unlink()
    assert main(["generate", "--weights", str(folder), "w1"]) == 2
    assert "tokenizer.json: missing" in capsys.readouterr().err


def test_text_pieces_hold_back_incomplete_characters():
    class Bytes:
        def decode(self, ids, skip_special_tokens=True):
            return bytes(ids).decode("utf-8", errors="replace")

    euro = list("€".encode())
    assert list(generate_cli.text_pieces(Bytes(), [104, *euro, 105])) == ["h", "€", "i"]

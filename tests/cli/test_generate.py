"""`zoo generate` with a checkpoint folder made here; zoo.hub's loading is stubbed until it
is merged (the end-to-end test through zoo.hub belongs with it)."""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

import zoo
import zoo.hub.loading
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
    monkeypatch.setattr(generate_cli, "resolve", lambda weights, revision, gguf_file=None: tmp_path)
    monkeypatch.setattr(zoo.hub.loading, "from_pretrained", lambda path, dtype, device, dequantize: model)
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


CHATML = (
    "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} w1 {% endfor %}"
    "{% if add_generation_prompt %}w3 {% endif %}"
)


def test_chat_applies_the_template_and_stops_at_its_end_of_turn(checkpoint, capsys):
    folder, model = checkpoint
    words = ["system", "user"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS[:-2] + words)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    system, user = VOCAB - 2, VOCAB - 1
    prompt = [system, 7, 1, user, 5, 9, 1, 3]  # what the template renders, as ids
    reply = zoo.generate(model, torch.tensor([prompt]), max_new_tokens=6, temperature=3.0, seed=1)[
        0, len(prompt) :
    ].tolist()
    assert len(set(reply)) > 2
    stop = WORDS[reply[3]]
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML, "eos_token": stop}))
    assert main(["generate", "--weights", str(folder), "--chat", "--system", "w7", "w5 w9", *SAMPLING]) == 0
    messages = [{"role": "system", "content": "w7"}, {"role": "user", "content": "w5 w9"}]
    cut = reply.index(reply[3])
    assert zoo.chat(model, messages, weights=folder, max_new_tokens=6, temperature=3.0, seed=1) == " ".join(
        WORDS[t] for t in reply[:cut]
    )
    # the reply only (decoded after the rendered prompt, as it streams), not the template's text
    assert capsys.readouterr().out == "".join(" " + WORDS[t] for t in reply[: reply.index(reply[3])]) + "\n"


def test_chat_without_a_template_is_one_line(checkpoint, capsys):
    folder, _ = checkpoint
    assert main(["generate", "--weights", str(folder), "--chat", "w5"]) == 2
    assert "chat_template: this checkpoint has none" in capsys.readouterr().err


def test_system_needs_chat(checkpoint, capsys):
    folder, _ = checkpoint
    assert main(["generate", "--weights", str(folder), "--system", "hi", "w5"]) == 2
    assert "--system: only with --chat" in capsys.readouterr().err


def test_an_encoder_fails_before_the_prompt_is_printed(checkpoint, monkeypatch, capsys):
    folder, _ = checkpoint
    encoder = zoo.build(
        zoo.spec("bert-base-uncased").model_copy(
            update={"vocab_size": VOCAB, "n_layers": 1, "d_model": 32, "n_heads": 2, "max_seq_len": 64}
        ),
        init=False,
    )
    monkeypatch.setattr(zoo.hub.loading, "from_pretrained", lambda path, dtype, device, dequantize: encoder)
    assert main(["generate", "--weights", str(folder), "w5 w9"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "cannot generate" in out.err


def test_zoo_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("zoo 0.")


def test_a_gguf_held_packed_generates_in_bfloat16_unless_told(checkpoint, monkeypatch, tmp_path):
    from tests.hub.gguf.test_quantized_table import q8_file

    folder, model = checkpoint
    path, _ = q8_file(tmp_path, tied=True)
    text = generate_cli.checkpoint_text(folder)
    monkeypatch.setattr(generate_cli, "resolve", lambda weights, revision, gguf_file=None: path)
    monkeypatch.setattr(generate_cli, "checkpoint_text", lambda p: text)
    seen = []
    monkeypatch.setattr(
        zoo.hub.loading,
        "from_pretrained",
        lambda path, dtype, device, dequantize: seen.append((dtype, dequantize)) or model,
    )
    for extra in ([], ["--dequantize"], ["--dtype", "float16"]):
        assert main(["generate", "--weights", str(path), "w5", "--max-new-tokens", "2", *extra]) == 0
    assert seen == [("bfloat16", False), ("float32", True), ("float16", False)]

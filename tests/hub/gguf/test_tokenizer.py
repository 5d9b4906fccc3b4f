"""A GGUF's own tokenizer: byte-level BPE equal to the tokenizers library's on the same vocab
and merges, SentencePiece BPE with byte fallback, EOS ids, and `zoo generate` on a GGUF."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

import zoo
from zoo.cli import main
from zoo.cli.generate import text_pieces
from zoo.hub.gguf.reader import GGUFCheckpoint
from zoo.hub.gguf.tokenizer import gguf_eos_ids, gguf_tokenizer
from zoo.quant.linear import Int8Linear

gguf = pytest.importorskip("gguf")
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, hello zoo! 12345 tokens",
    "it's a model's tokenizer; don't panic",
    "naïve café — déjà vu",
] * 4
TEXTS = ["hello world", "the lazy fox's tokens 2024", "  spaced   out\nnew line", "café déjà", "unseen: qxz ☃"]


def trained_bpe() -> Tokenizer:
    """A GPT-2 style byte-level BPE trained here (the reference), with an end-of-text token."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def bpe_vocab(reference: Tokenizer, eos: int | None = None) -> Any:
    """A write_gguf ``vocab`` callback writing the reference's vocab as llama.cpp's gpt2 model."""
    data = json.loads(reference.to_str())
    vocab = data["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    end = reference.token_to_id("<|endoftext|>")

    def write(w: Any) -> None:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-2")
        w.add_token_list(tokens)
        w.add_token_merges(merges)
        w.add_token_types([3 if t == "<|endoftext|>" else 1 for t in tokens])
        w.add_eos_token_id(end if eos is None else eos)
        w.add_bos_token_id(end)
        w.add_add_bos_token(False)

    return write


def _tokenizer_only_gguf(path: Path, vocab: Any) -> GGUFCheckpoint:
    w = gguf.GGUFWriter(str(path), "qwen3")
    vocab(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return GGUFCheckpoint(path)


def test_byte_level_bpe_equals_the_reference(tmp_path: Path) -> None:
    reference = trained_bpe()
    g = _tokenizer_only_gguf(tmp_path / "t.gguf", bpe_vocab(reference))
    tokenizer = gguf_tokenizer(g)
    for text in TEXTS + ["<|endoftext|>hello"]:
        assert tokenizer.encode(text).ids == reference.encode(text).ids, text
        assert tokenizer.decode(tokenizer.encode(text).ids) == text.replace("<|endoftext|>", "")
    assert gguf_eos_ids(g) == [reference.token_to_id("<|endoftext|>")]


def spm_vocab(w: Any) -> None:
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    words = [
        "▁",
        "h",
        "e",
        "l",
        "o",
        "w",
        "r",
        "d",
        "▁h",
        "▁he",
        "▁hel",
        "▁hell",
        "▁hello",
        "▁w",
        "▁wo",
        "▁wor",
        "▁worl",
        "▁world",
        "ll",
        "lo",
    ]
    tokens = pieces + words
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(pieces) + [-float(i) for i in range(len(words))])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * len(words))
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def test_sentencepiece_bpe_with_byte_fallback(tmp_path: Path) -> None:
    tokenizer = gguf_tokenizer(_tokenizer_only_gguf(tmp_path / "spm.gguf", spm_vocab))
    encoded = tokenizer.encode("hello world €")
    assert encoded.tokens == ["<s>", "▁hello", "▁world", "▁", "<0xE2>", "<0x82>", "<0xAC>"]
    assert tokenizer.decode(encoded.ids) == "hello world €"


def test_unsupported_tokenizer_kinds_are_named(tmp_path: Path) -> None:
    path = tmp_path / "pre.gguf"
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_tokenizer_pre("made-up")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(zoo.errors.CheckpointError, match="tokenizer.ggml.pre: 'made-up' is not supported"):
        gguf_tokenizer(GGUFCheckpoint(path))


def tiny_model_with_vocab(vocab_size: int) -> Any:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.Qwen3Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        vocab_size=vocab_size,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param))  # large weights: a varied greedy continuation
    return model


def _printed(reference: Tokenizer, ids: torch.Tensor, tokens: list[int]) -> str:
    """What `zoo generate` prints for these tokens with the reference tokenizer."""
    return "".join(text_pieces(reference, tokens, context=ids[0].tolist()))


def test_zoo_generate_uses_the_ggufs_tokenizer_and_eos(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.hub.gguf_files import write_gguf

    reference = trained_bpe()
    prompt = "hello world"
    ids = torch.tensor([reference.encode(prompt).ids])
    hf_model = tiny_model_with_vocab(reference.get_vocab_size())
    path = write_gguf(tmp_path / "chat.gguf", hf_model, vocab=bpe_vocab(reference))
    greedy = zoo.generate(zoo.from_pretrained(path, progress=False), ids, max_new_tokens=8)[0, ids.shape[1] :].tolist()

    assert main(["generate", "--weights", str(path), prompt, "--max-new-tokens", "8", "--device", "cpu"]) == 0
    assert capsys.readouterr().out == prompt + _printed(reference, ids, greedy) + "\n"

    assert len(set(greedy)) > 2
    stop = greedy[3]  # the GGUF's EOS id ends generation where it first appears
    path = write_gguf(tmp_path / "eos.gguf", hf_model, vocab=bpe_vocab(reference, eos=stop))
    assert main(["generate", "--weights", str(path), prompt, "--max-new-tokens", "8", "--device", "cpu"]) == 0
    assert capsys.readouterr().out == prompt + _printed(reference, ids, greedy[: greedy.index(stop)]) + "\n"


def test_eval_text_uses_the_ggufs_tokenizer(tmp_path: Path) -> None:
    import math

    reference = trained_bpe()
    hf_model = tiny_model_with_vocab(reference.get_vocab_size())
    path = write_gguf_file(tmp_path / "eval.gguf", hf_model, bpe_vocab(reference))
    text = "hello world, the quick brown fox jumps over the lazy dog"
    (tmp_path / "eval.txt").write_text(text)
    ids = torch.tensor([reference.encode(text).ids])
    with torch.no_grad():
        expected = math.exp(float(hf_model(ids, labels=ids).loss))
    run = {
        "weights": str(path),
        "eval_text": str(tmp_path / "eval.txt"),
        "device": "cpu",
        "dtype": "float32",
        "prompt_len": 4,
        "gen_len": 2,
        "repeats": 1,
        "threads": 1,
    }
    assert zoo.bench(None, **run).eval_perplexity == pytest.approx(expected, rel=1e-4)


def test_eval_text_on_a_checkpoint_without_tokenizer_is_an_error(tmp_path: Path) -> None:
    hf_model = tiny_model_with_vocab(300)
    path = write_gguf_file(tmp_path / "bare.gguf", hf_model, None)
    (tmp_path / "eval.txt").write_text("some text to score")
    run = {
        "weights": str(path),
        "eval_text": str(tmp_path / "eval.txt"),
        "device": "cpu",
        "dtype": "float32",
        "prompt_len": 4,
        "gen_len": 2,
        "repeats": 1,
        "threads": 1,
    }
    with pytest.raises(zoo.errors.CheckpointError, match="holds no tokenizer"):
        zoo.bench(None, **run)


def write_gguf_file(path: Path, hf_model: Any, vocab: Any) -> Path:
    from tests.hub.gguf_files import write_gguf

    return write_gguf(path, hf_model, vocab=vocab)


def test_save_pretrained_of_a_gguf_keeps_its_tokenizer_template_and_ids(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    reference = trained_bpe()
    hf_model = tiny_model_with_vocab(reference.get_vocab_size())
    end = reference.token_to_id("<|endoftext|>")
    template = "{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}"

    def vocab(w: Any) -> None:
        bpe_vocab(reference)(w)
        w.add_chat_template(template)

    path = write_gguf_file(tmp_path / "chat.gguf", hf_model, vocab)
    packed = zoo.from_pretrained(path, progress=False)
    packed.layers[0].attention.q_proj = Int8Linear(torch.ones(32, 32), None, torch.float32)  # as a Q8_0 file loads
    with pytest.raises(zoo.errors.CheckpointError, match="load it with dequantize=True"):
        zoo.save_pretrained(packed, tmp_path / "no")
    out = zoo.save_pretrained(zoo.from_pretrained(path, progress=False, dequantize=True), tmp_path / "saved")
    config = json.loads((out / "config.json").read_text())
    assert config["eos_token_id"] == [end] and config["bos_token_id"] == end
    saved = transformers.AutoTokenizer.from_pretrained(str(out))
    assert saved.chat_template == template and saved.eos_token == "<|endoftext|>"
    for text in TEXTS:
        assert saved.encode(text) == gguf_tokenizer(GGUFCheckpoint(path)).encode(text).ids

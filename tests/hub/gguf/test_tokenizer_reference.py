"""zoo's GGUF tokenizers against transformers' tokenizer built from the same file
(``AutoTokenizer.from_pretrained(dir, gguf_file=...)``): the same ids and the same decoded
text on multilingual, code and whitespace-heavy text, per tokenizer model and pre-tokenizer.

Pre-tokenizers transformers does not know (it falls back to GPT-2's split) are checked
against the split their original ``tokenizer.json`` declares (SmolLM, StarCoder: digits
one by one, then GPT-2's regex).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from zoo.hub.gguf.pretokenizers import GPT2, PRE_TOKENIZERS
from zoo.hub.gguf.reader import GGUFCheckpoint
from zoo.hub.gguf.tokenizer import gguf_tokenizer

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")
SAMPLES = [
    "Hello world! Bonjour, ça va? Привет, мир. 你好，世界。 مرحبا بالعالم 🦙 naïve café",
    "def add(a, b):\n    return a + b\n\n\nclass Foo:\n\tx = 1_000_000  # 3.14159\n",
    "   leading spaces,  double  spaces,\ttabs\t\tand trailing   \n\n  \r\n",
    "I'm sure they'll say it's THE best; don't you think? 2024-01-31 12345678",
    "<think>reasoning</think> then<|endoftext|>text",
]
CORPUS = SAMPLES * 3 + ["the quick brown fox jumps over the lazy dog", "return value = compute(x, y)"]
# names whose split transformers implements itself (its GGUF_PRE_TOKENIZER_SPLITS), plus GPT-2's
TRANSFORMERS_NAMES = [
    "gpt-2",
    "olmo",
    "llama-bpe",
    "llama3",
    "dbrx",
    "smaug-bpe",
    "qwen2",
    "deepseek-r1-qwen",
    "tekken",
    "gpt-4o",
    "llama4",
    "qwen35",
    "falcon3",
]
DIGITS_THEN_GPT2 = ["smollm", "starcoder", "refact", "command-r", "codeshell"]


def _write(path: Path, arch: str, fill: Any) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _byte_level_vocab() -> tuple[list[str], list[str]]:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=["<|endoftext|>", "<think>", "</think>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    model = json.loads(tokenizer.to_str())["model"]
    tokens = sorted(model["vocab"], key=model["vocab"].get)
    return tokens, [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]


def _byte_level_gguf(path: Path, pre: str) -> Path:
    tokens, merges = _byte_level_vocab()
    types = {"<|endoftext|>": 3, "<think>": 4, "</think>": 4}

    def fill(w: Any) -> None:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_merges(merges)
        w.add_token_types([types.get(t, 1) for t in tokens])
        w.add_eos_token_id(tokens.index("<|endoftext|>"))
        w.add_bos_token_id(tokens.index("<|endoftext|>"))
        w.add_add_bos_token(False)

    return _write(path, "qwen3", fill)


def _reference(path: Path) -> Any:
    transformers.logging.set_verbosity_error()
    return transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def _same_as_transformers(path: Path) -> None:
    ours, theirs = gguf_tokenizer(GGUFCheckpoint(path)), _reference(path)
    for text in SAMPLES:
        ids = ours.encode(text).ids
        assert ids == theirs.encode(text), text
        assert ours.decode(ids, skip_special_tokens=False) == theirs.decode(ids), text
        assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True), text


@pytest.mark.parametrize("pre", TRANSFORMERS_NAMES)
def test_byte_level_bpe_equals_transformers(pre: str, tmp_path: Path) -> None:
    _same_as_transformers(_byte_level_gguf(tmp_path / f"{pre}.gguf", pre))


@pytest.mark.parametrize("pre", DIGITS_THEN_GPT2)
def test_digit_splitting_pre_tokenizers_equal_their_tokenizer_json(pre: str, tmp_path: Path) -> None:
    path = _byte_level_gguf(tmp_path / f"{pre}.gguf", pre)
    ours = gguf_tokenizer(GGUFCheckpoint(path))
    reference = _reference(path).backend_tokenizer  # the vocabulary, merges and added tokens
    reference.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    for text in SAMPLES:
        assert ours.encode(text).ids == reference.encode(text, add_special_tokens=False).ids, text
        assert ours.decode(ours.encode(text).ids, skip_special_tokens=False) == text


def test_every_named_pre_tokenizer_builds_and_round_trips(tmp_path: Path) -> None:
    for pre in PRE_TOKENIZERS:
        tokenizer = gguf_tokenizer(GGUFCheckpoint(_byte_level_gguf(tmp_path / "t.gguf", pre)))
        for text in SAMPLES:
            assert tokenizer.decode(tokenizer.encode(text).ids, skip_special_tokens=False) == text, (pre, text)
    assert GPT2 in PRE_TOKENIZERS["smollm"]


def _sentencepiece_gguf(path: Path, arch: str) -> Path:
    """A SentencePiece vocabulary as llama.cpp writes one: control, byte and user-defined
    tokens (newline, tab, runs of spaces spelled with real spaces as Gemma's converter does)."""
    trained = Tokenizer(models.BPE(unk_token="<unk>"))
    trained.pre_tokenizer = pre_tokenizers.Metaspace()
    trained.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=500, show_progress=False))
    pieces = [t for t, _ in sorted(trained.get_vocab().items(), key=lambda kv: kv[1])]
    bos, eos = ("<bos>", "<eos>") if arch.startswith("gemma") else ("<s>", "</s>")
    user = ["\n", "\t", "  ", "   ", "<think>", "</think>"]
    control = ["<unk>", bos, eos, "<end_of_turn>"]
    tokens = control + [f"<0x{b:02X}>" for b in range(256)] + user + [p for p in pieces if p not in control]
    types = [3] * len(control) + [6] * 256 + [4] * len(user) + [1] * (len(tokens) - len(control) - 256 - len(user))
    types[0] = 2

    def fill(w: Any) -> None:
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores([0.0] * (len(control) + 256 + len(user)) + [-float(i) for i in range(len(tokens) - 266)])
        w.add_token_types(types)
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        if arch.startswith("gemma"):
            w.add_add_space_prefix(False)

    return _write(path, arch, fill)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_sentencepiece_equals_transformers(arch: str, tmp_path: Path) -> None:
    _same_as_transformers(_sentencepiece_gguf(tmp_path / f"{arch}.gguf", arch))


def test_sentencepiece_keeps_newlines_and_user_defined_tokens(tmp_path: Path) -> None:
    tokenizer = gguf_tokenizer(GGUFCheckpoint(_sentencepiece_gguf(tmp_path / "g.gguf", "gemma3")))
    for text in ["Hello\nworld", "def f():\n    return 1\n", "<think>hmm</think> ok"]:
        assert tokenizer.decode(tokenizer.encode(text).ids, skip_special_tokens=True) == text

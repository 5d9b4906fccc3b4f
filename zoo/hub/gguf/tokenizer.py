"""A GGUF file's own tokenizer (``tokenizer.ggml.*`` metadata), built with the tokenizers library.

Two kinds, as llama.cpp names them in ``tokenizer.ggml.model``:

- ``gpt2``: byte-level BPE from ``tokens`` and ``merges``, split first by the regex that
  ``tokenizer.ggml.pre`` names (the same regexes as llama.cpp's ``llama-vocab.cpp``);
- ``llama``: SentencePiece BPE from ``tokens`` and ``scores`` (merges rebuilt from the
  scores, as transformers' SentencePiece converter does), with byte fallback.

Control and user-defined tokens (``token_type`` 3 and 4) are matched whole; a BOS token is
prepended when ``tokenizer.ggml.add_bos_token`` says so. An unknown model or pre-tokenizer is
a ``CheckpointError`` naming it: a tokenizer that splits text differently from the one the
model was trained with would produce plausible-looking nonsense.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoo.errors import CheckpointError, allowed
from zoo.hub.gguf.reader import GGUFCheckpoint

_GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
           r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
_QWEN2 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
          r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
_O200K = (r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"""
          r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"""
          r"""\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
PRE_TOKENIZERS: dict[str, str] = {
    "default": _GPT2, "gpt-2": _GPT2, "llama-bpe": _LLAMA3, "llama3": _LLAMA3, "smaug-bpe": _LLAMA3,
    "qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2, "gpt-4o": _O200K,
}
CONTROL, USER_DEFINED = 3, 4
MAX_SPLIT_WORK = 1 << 28  # merges are rebuilt by trying every split of each piece; real vocabularies need ~10**7


def _special_tokens(g: GGUFCheckpoint, tokens: list[str]) -> list[Any]:
    from tokenizers import AddedToken

    types = g.numbers("tokenizer.ggml.token_type", None, integers=True)
    if types is None:
        return []
    if len(types) != len(tokens):
        raise CheckpointError(f"{g.path}: tokenizer.ggml.token_type: {len(types):,} types for {len(tokens):,} tokens; "
                              "allowed: one type per token")
    special = np.flatnonzero((types == CONTROL) | (types == USER_DEFINED)).tolist()  # no loop over the vocabulary
    return [AddedToken(tokens[i], special=bool(types[i] == CONTROL), normalized=False) for i in special]


def _byte_level_bpe(g: GGUFCheckpoint, tokens: list[str]) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    pre = g.text("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise CheckpointError(f"{g.path}: tokenizer.ggml.pre: {pre!r} is not supported; allowed: {allowed(PRE_TOKENIZERS)}")
    merges = [tuple(m.split(" ", 1)) for m in g.strings("tokenizer.ggml.merges", [])]
    if any(len(m) != 2 for m in merges):
        raise CheckpointError(f"{g.path}: tokenizer.ggml.merges: an entry without a space; allowed: 'left right' pairs")
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab, merges, ignore_merges=pre in ("llama-bpe", "llama3")))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRE_TOKENIZERS[pre]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _sentencepiece_bpe(g: GGUFCheckpoint, tokens: list[str]) -> Any:
    from tokenizers import Tokenizer, decoders, models, normalizers

    scores = g.numbers("tokenizer.ggml.scores", None)
    if scores is None:
        scores = np.zeros(len(tokens))
    if len(scores) != len(tokens):
        raise CheckpointError(f"{g.path}: tokenizer.ggml.scores: {len(scores):,} scores for {len(tokens):,} tokens; "
                              "allowed: one score per token")
    work = sum(len(t) * len(t) for t in tokens)  # each split of a piece copies it: quadratic in its length
    if work > MAX_SPLIT_WORK:
        raise CheckpointError(f"{g.path}: tokenizer.ggml.tokens: pieces too long to rebuild merges from "
                              f"(sum of squared lengths {work:,}; at most {MAX_SPLIT_WORK:,})")
    vocab = {token: i for i, token in enumerate(tokens)}
    merges = []
    for token, score in zip(tokens, scores.tolist()):  # every split of a piece into two pieces is a merge
        for cut in range(1, len(token)):
            if token[:cut] in vocab and token[cut:] in vocab:
                merges.append((score, vocab[token[:cut]], vocab[token[cut:]], token[:cut], token[cut:]))
    merges.sort(key=lambda m: (-m[0], m[1], m[2]))
    unk = g.token_id("tokenizer.ggml.unknown_token_id", len(tokens))
    tokenizer = Tokenizer(models.BPE(vocab, [(a, b) for *_, a, b in merges], byte_fallback=True, fuse_unk=True,
                                     unk_token=tokens[unk] if unk is not None else None))
    prefix = g.flag("tokenizer.ggml.add_space_prefix", True)
    steps = [normalizers.Prepend("▁")] if prefix else []
    tokenizer.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", "▁")])
    decode = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    tokenizer.decoder = decoders.Sequence([*decode, decoders.Strip(" ", 1, 0)] if prefix else decode)
    return tokenizer


BUILDERS = {"gpt2": _byte_level_bpe, "llama": _sentencepiece_bpe}


def gguf_tokenizer(g: GGUFCheckpoint) -> Any:
    """A ``tokenizers.Tokenizer`` equal to the one the GGUF describes."""
    from tokenizers import processors

    kind = g.text("tokenizer.ggml.model", None)
    tokens = g.strings("tokenizer.ggml.tokens", [])
    if kind is None or not tokens:
        raise CheckpointError(f"{g.path}: tokenizer.ggml.model: missing; this GGUF holds no tokenizer")
    if len(set(tokens)) != len(tokens):
        raise CheckpointError(f"{g.path}: tokenizer.ggml.tokens: a token appears twice; allowed: distinct tokens")
    if kind not in BUILDERS:
        raise CheckpointError(f"{g.path}: tokenizer.ggml.model: {kind!r} is not supported; allowed: {allowed(BUILDERS)}")
    try:
        tokenizer = BUILDERS[kind](g, tokens)
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - the tokenizers library raises plain Exceptions (a merge of unknown tokens)
        raise CheckpointError(f"{g.path}: tokenizer.ggml.*: not a tokenizer the tokenizers library builds: "
                              f"{str(exc).splitlines()[0][:200]}") from None
    tokenizer.add_special_tokens(_special_tokens(g, tokens))
    bos = g.token_id("tokenizer.ggml.bos_token_id", len(tokens))
    if bos is not None and g.flag("tokenizer.ggml.add_bos_token", kind == "llama"):
        tokenizer.post_processor = processors.TemplateProcessing(single=f"{tokens[bos]} $A", special_tokens=[(tokens[bos], bos)])
    return tokenizer


def gguf_eos_ids(g: GGUFCheckpoint) -> list[int]:
    """End-of-generation ids: EOS, end-of-turn and end-of-message where the GGUF names them."""
    keys = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
    vocab = len(g.strings("tokenizer.ggml.tokens", [])) or g.shape("token_embd.weight")[0]
    ids = [i for i in (g.token_id(k, vocab) for k in keys) if i is not None]
    return list(dict.fromkeys(ids))

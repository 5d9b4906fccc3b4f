"""A GGUF file's own tokenizer (``tokenizer.ggml.*`` metadata), built with the tokenizers library.

Two kinds, as llama.cpp names them in ``tokenizer.ggml.model``:

- ``gpt2``: byte-level BPE from ``tokens`` and ``merges``, split first by the regexes that
  ``tokenizer.ggml.pre`` names (zoo/hub/gguf/pretokenizers.py, llama.cpp's table);
- ``llama``: SentencePiece BPE from ``tokens`` and ``scores`` (merges rebuilt from the
  scores as transformers' ``generate_merges`` does; Gemma's in file order, since its scores
  do not follow its merges), with byte fallback and llama.cpp's ``add_space_prefix``.

Control tokens (``token_type`` 3) are special: matched whole, dropped when decoding with
``skip_special_tokens``. User-defined tokens (4: Gemma's ``\\n``, runs of spaces, ``<think>``)
are matched whole but are text, so they decode. BOS is prepended when
``tokenizer.ggml.add_bos_token`` says so (llama.cpp's default per kind otherwise). An unknown
model or pre-tokenizer is a ``CheckpointError`` naming it: a tokenizer that splits text
differently from the one the model was trained with produces plausible-looking nonsense.
"""

from __future__ import annotations

from typing import Any

from zoo.errors import CheckpointError, allowed
from zoo.hub.gguf.pretokenizers import IGNORE_MERGES, PRE_TOKENIZERS
from zoo.hub.gguf.reader import GGUFCheckpoint

CONTROL, USER_DEFINED = 3, 4
MAX_SPLIT_WORK = 1 << 28  # merges are rebuilt by trying every split of each piece; real vocabularies need ~10**7
SPACE = "\u2581"
# Gemma's SentencePiece files: merges follow the order of the vocabulary, not the scores, and
# pieces of spaces are spelled with real spaces ("  " for the model's SPACE * 2)
GEMMA_STYLE = frozenset({"gemma", "gemma2", "gemma3", "gemma3n"})


def _pre_tokenizer_name(g: GGUFCheckpoint) -> str:
    pre = g.text("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise CheckpointError(f"{g.path}: tokenizer.ggml.pre: {pre!r} is not supported; {allowed(PRE_TOKENIZERS)}")
    return pre


def _byte_level_bpe(g: GGUFCheckpoint, tokens: list[str]) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    pre = _pre_tokenizer_name(g)
    merges = [tuple(m.split(" ", 1)) for m in g.strings("tokenizer.ggml.merges", [])]
    if any(len(m) != 2 for m in merges):
        raise CheckpointError(f"{g.path}: tokenizer.ggml.merges: an entry without a space; allowed: 'left right' pairs")
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab, merges, ignore_merges=pre in IGNORE_MERGES))
    splits = [pre_tokenizers.Split(Regex(regex), behavior="isolated") for regex in PRE_TOKENIZERS[pre]]
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def sentencepiece_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """Every split of a piece into two pieces is a merge, best score first; ties by the longer
    left then right part, then vocabulary order (transformers' ``generate_merges``)."""
    vocab = {token: i for i, token in enumerate(tokens)}
    merges = []
    for token, score in zip(tokens, scores):
        pairs = [
            (token[:cut], token[cut:]) for cut in range(1, len(token)) if token[:cut] in vocab and token[cut:] in vocab
        ]
        merges.extend((a, b, score) for a, b in sorted(pairs, key=lambda p: (vocab[p[0]], vocab[p[1]])))
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)  # stable: ties keep vocabulary order
    return [(a, b) for a, b, _ in merges]


def respelled(tokens: list[str]) -> list[str]:
    """Gemma's pieces of real spaces ("  ") spelled as the model spells them (SPACE * 2)."""
    return [SPACE * len(t) if t and not t.strip(" ") else t for t in tokens]


def _sentencepiece_bpe(g: GGUFCheckpoint, tokens: list[str]) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    if g.architecture in GEMMA_STYLE:
        tokens = respelled(tokens)
        scores = [-float(i) for i in range(len(tokens))]
    else:
        found = g.numbers("tokenizer.ggml.scores", None)
        if found is not None and len(found) != len(tokens):
            raise CheckpointError(
                f"{g.path}: tokenizer.ggml.scores: {len(found):,} scores for {len(tokens):,} tokens; "
                "allowed: one score per token"
            )
        scores = [0.0] * len(tokens) if found is None else found.tolist()
    work = sum(len(t) * len(t) for t in tokens)  # each split of a piece copies it: quadratic in its length
    if work > MAX_SPLIT_WORK:
        raise CheckpointError(
            f"{g.path}: tokenizer.ggml.tokens: pieces too long to rebuild merges from "
            f"(sum of squared lengths {work:,}; at most {MAX_SPLIT_WORK:,})"
        )
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab, sentencepiece_merges(tokens, scores), byte_fallback=True, fuse_unk=True))
    prefix = g.flag("tokenizer.ggml.add_space_prefix", True)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement=SPACE, prepend_scheme="first" if prefix else "never", split=False
    )
    decode = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tokenizer.decoder = decoders.Sequence([*decode, decoders.Strip(" ", 1, 0)] if prefix else decode)
    return tokenizer


BUILDERS = {"gpt2": _byte_level_bpe, "llama": _sentencepiece_bpe}
ADD_BOS_DEFAULT = {"llama": True}  # llama.cpp adds BOS to SentencePiece text unless the file says not to


def check_tokenizer(g: GGUFCheckpoint) -> None:
    """The tokenizer this GGUF describes is one zoo builds, else one error naming what is not
    (cheap: metadata only, so callers run it before reading a weight)."""
    kind = g.text("tokenizer.ggml.model", None)
    if kind is None or not g.strings("tokenizer.ggml.tokens", []):
        raise CheckpointError(f"{g.path}: tokenizer.ggml.model: missing; this GGUF holds no tokenizer")
    if kind not in BUILDERS:
        raise CheckpointError(f"{g.path}: tokenizer.ggml.model: {kind!r} is not supported; {allowed(BUILDERS)}")
    if kind == "gpt2":
        _pre_tokenizer_name(g)
    vocab = len(g.strings("tokenizer.ggml.tokens", []))
    for key in ("bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id"):
        g.token_id(f"tokenizer.ggml.{key}", vocab)  # each id named by the metadata lies in the vocabulary


def _added_tokens(g: GGUFCheckpoint, tokens: list[str], kind: str) -> tuple[list[Any], list[Any]]:
    """(control tokens, user-defined tokens) as AddedTokens; in a byte-level vocabulary a
    control token spelled outside the byte alphabet is a converter's mislabel and stays out."""
    from tokenizers import AddedToken, pre_tokenizers

    alphabet = set(pre_tokenizers.ByteLevel.alphabet()) if kind == "gpt2" else None
    found = g.numbers("tokenizer.ggml.token_type", None, integers=True)
    if found is not None and len(found) != len(tokens):
        raise CheckpointError(
            f"{g.path}: tokenizer.ggml.token_type: {len(found):,} types for {len(tokens):,} tokens; "
            "allowed: one type per token"
        )
    types = [] if found is None else found.tolist()
    spelled = set(respelled(tokens) if kind == "llama" and g.architecture in GEMMA_STYLE else tokens)
    control = [
        AddedToken(tokens[i], special=True, normalized=False)
        for i, t in enumerate(types)
        if t == CONTROL and (alphabet is None or set(tokens[i]) <= alphabet)
    ]
    user = [
        AddedToken(tokens[i], special=False, normalized=False)
        for i, t in enumerate(types)
        if t == USER_DEFINED and tokens[i] in spelled
    ]
    return control, user


def gguf_tokenizer(g: GGUFCheckpoint) -> Any:
    """A ``tokenizers.Tokenizer`` equal to the one the GGUF describes."""
    from tokenizers import processors

    check_tokenizer(g)
    kind = g.text("tokenizer.ggml.model")
    tokens = g.strings("tokenizer.ggml.tokens", [])
    try:
        tokenizer = BUILDERS[kind](g, tokens)
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(
            f"{g.path}: tokenizer.ggml.*: not a tokenizer the tokenizers library builds: "
            f"{str(exc).splitlines()[0][:200]}"
        ) from None
    control, user = _added_tokens(g, tokens, kind)
    tokenizer.add_special_tokens(control)
    tokenizer.add_tokens(user)  # text, not special: kept by decode(skip_special_tokens=True)
    bos = g.token_id("tokenizer.ggml.bos_token_id", len(tokens))
    if bos is not None and g.flag("tokenizer.ggml.add_bos_token", ADD_BOS_DEFAULT.get(kind, False)):
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]} $A", special_tokens=[(tokens[bos], int(bos))]
        )
    return tokenizer


def gguf_eos_ids(g: GGUFCheckpoint) -> list[int]:
    """End-of-generation ids: EOS, end-of-turn and end-of-message where the GGUF names them."""
    keys = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
    vocab = len(g.strings("tokenizer.ggml.tokens", [])) or g.shape("token_embd.weight")[0]
    ids = [i for i in (g.token_id(k, vocab) for k in keys) if i is not None]
    return list(dict.fromkeys(ids))


def gguf_chat_template(g: GGUFCheckpoint) -> str | None:
    """The chat template the file carries (``tokenizer.chat_template``), if any."""
    template = g.text("tokenizer.chat_template", None)
    return str(template) if template else None


def gguf_special_tokens(g: GGUFCheckpoint) -> dict[str, str]:
    """``bos_token`` / ``eos_token`` / ``unk_token`` / ``pad_token`` spelled as in the vocabulary."""
    tokens = g.strings("tokenizer.ggml.tokens", [])
    keys = {
        "bos_token": "bos_token_id",
        "eos_token": "eos_token_id",
        "unk_token": "unknown_token_id",
        "pad_token": "padding_token_id",
    }
    out = {}
    for name, key in keys.items():
        index = g.token_id(f"tokenizer.ggml.{key}", len(tokens)) if tokens else None
        if index is not None:
            out[name] = str(tokens[index])
    return out

"""llama.cpp's pre-tokenizers: ``tokenizer.ggml.pre`` name -> the regexes that split text
before byte-level BPE, applied in order (each splits the pieces of the one before; text no
regex matches stays a piece of its own), as ``llm_tokenizer_bpe`` in llama.cpp's
``src/llama-vocab.cpp`` lists them. The regexes are the original ``tokenizer.json`` forms
where llama.cpp adapted them for its own engine (``(?i:'s|...)`` for ``'[sS]|...``).

Names llama.cpp handles with custom code rather than regexes (``kimi-k2``, ``afmoe``,
``superbpe``, ``chameleon``, ``gemma4``, ...) are absent: zoo refuses them by name.
"""

from __future__ import annotations

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN2 = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN35 = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)
SEED_CODER = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)
BAILING = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s+"""
)
_UPPER, _LOWER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
GPT4O = (
    rf"""[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTION}|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTION}|"""
    r"""\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
TEKKEN = (
    rf"""[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*|"""
    r"""\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
PORO = r""" ?[^(\s|.,!?…。，、।۔،)]+"""
# escapes: characters that Unicode normalization would rewrite (Greek with oxia, ohm, kelvin)
_DEEPSEEK_LETTERS = (
    "[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1f7dᾀ-ᾴᾶ-ᾼ\u1fbeῂ-ῄῆ-ῌ"
    "ῐ-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ"
    "𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+"
)
DEEPSEEK_LLM = (
    r"[\r\n]",
    (r"\s?" + _DEEPSEEK_LETTERS),
    r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
    r"\s+$",
    r"[一-龥ࠀ-一가-퟿]+",
    r"\p{N}+",
)
DEEPSEEK_CODER = (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", r"[一-龥ࠀ-一가-퟿]+", r"\p{N}")
DEEPSEEK3 = (
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    (
        r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"""
        r""" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
    ),
)


def _names(names: str, regexes: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    return {name: regexes for name in names.split()}


# llama.cpp's names (convert_hf_to_gguf.py writes them) -> the regexes of their pre-type
PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
    **_names("default", (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")),
    **_names(
        "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 dbrx smaug-bpe glm4 chatglm-bpe", (LLAMA3,)
    ),
    **_names("deepseek-llm", DEEPSEEK_LLM),
    **_names("deepseek-coder", DEEPSEEK_CODER),
    **_names("deepseek-v3 hunyuan-dense", DEEPSEEK3),
    **_names("falcon", (r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]")),
    **_names("starcoder refact command-r smollm codeshell exaone minerva-7b", (r"\p{N}", GPT2)),
    **_names(
        "gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum jina-v1-en jina-v2-code "
        "roberta-bpe mpt olmo jais trillion granite-docling exaone4",
        (GPT2,),
    ),
    **_names("qwen2 deepseek-r1-qwen kormo megrez stablelm2 hunyuan", (QWEN2,)),
    **_names("qwen35", (QWEN35,)),
    **_names("grok-2", (QWEN2,)),
    **_names("poro-chat bloom gpt3-finnish", (PORO,)),
    **_names("viking", (PORO, r"\p{N}")),
    **_names("tekken", (TEKKEN,)),
    **_names("gpt-4o llama4 minimax-m2", (GPT4O,)),
    **_names("bailingmoe bailingmoe2 llada-moe", (BAILING,)),
    **_names("seed-coder", (SEED_CODER,)),
}
# llama.cpp matches a whole pre-token against the vocabulary before merging for these
IGNORE_MERGES = frozenset(_names("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 tekken", ()))

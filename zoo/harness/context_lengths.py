"""Context lengths as the options and sweep files give them: ``4k`` = 4096 (k = 1024).

A module of its own (no zoo imports beyond errors) so the plan (``grid``), the per-context
records (``contexts``) and the plots read one parser without importing each other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zoo.errors import BenchError

MAX_CONTEXT = 2**24  # 16M tokens: far beyond any preset, and cache_bytes stays instant
CONTEXT_HELP = "positive integers, k = 1024 (4k = 4096), e.g. 4k,32k,128k"


def parse_context(value: Any, what: str = "--contexts") -> int:
    """``"4k"`` -> 4096, ``"4096"`` or ``4096`` -> 4096; anything else a BenchError naming ``what``."""
    text = str(value).strip().lower() if not isinstance(value, bool) else ""
    scale = 1024 if text.endswith("k") else 1
    digits = text[:-1] if scale > 1 else text
    if isinstance(value, float) and value.is_integer():
        digits = str(int(value))
    if not digits.isdigit() or not 1 <= int(digits) * scale <= MAX_CONTEXT:
        raise BenchError(
            f"{what}: {value!r} is not a context length; allowed: {CONTEXT_HELP} (at most {MAX_CONTEXT:,})"
        )
    return int(digits) * scale


def parse_contexts(value: str | Iterable[Any], what: str = "--contexts") -> list[int]:
    """A comma list (``"4k,32k"``) or a sequence of lengths, sorted; an empty or repeated one fails."""
    items = [v for v in value.split(",")] if isinstance(value, str) else list(value)
    lengths = [parse_context(v, what) for v in items]
    if not lengths:
        raise BenchError(f"{what}: no context lengths given; allowed: {CONTEXT_HELP}")
    if len(set(lengths)) != len(lengths):
        repeated = next(n for n in lengths if lengths.count(n) > 1)
        raise BenchError(f"{what}: {format_context(repeated)} given twice; give each length once")
    return sorted(lengths)


def format_context(n: int) -> str:
    """4096 -> '4k', 1000 -> '1000'."""
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)

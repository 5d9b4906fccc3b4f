"""The base of every component's options (the contract's bottom: the registry, resolved
components and part interfaces all type against it)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import ConfigDict

from zoo.specs.strict_numbers import StrictNumbers


class Options(StrictNumbers):
    """Base of every component's options: unknown keys are errors, values are immutable.

    ``reset_on_kind_change`` names options that a spec must not carry over when another kind
    replaces this one (``mqa`` fixes ``n_kv_heads``; carrying 8 over would contradict it).

    ``follows`` maps an option to the option it is tied to: an update of the same kind that
    sets the leader but not the follower drops the follower's stored value, so the kind's
    default derives it again (``mha``: ``n_kv_heads`` follows ``n_heads``, so
    ``attention.n_heads=4`` on a 12-head model gives 4 key/value heads, not a refusal).
    Both names must be options of the class (checked at registration). ``tiny``: values of the
    options that set a width (heads, inner widths, experts) for ``zoo plugins --check``'s d_model-64 models.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    reset_on_kind_change: ClassVar[frozenset[str]] = frozenset()
    follows: ClassVar[Mapping[str, str]] = {}
    tiny: ClassVar[Mapping[str, Any]] = {}


def divisors_listed(n: int, most: int = 32) -> str:
    """`` (1, 2, ...)``: n's divisors for an error message that says what is allowed, found in
    sqrt(n) steps (46,341 at the largest size a spec allows) and only where there are at most
    ``most``; a config's n_heads of 2**31 - 1 once took 7 minutes to fail, its divisors listed
    one candidate at a time."""
    low = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    found = sorted({*low, *(n // d for d in low)})
    return f" ({', '.join(map(str, found))})" if len(found) <= most else ""

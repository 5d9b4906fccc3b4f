"""Cells of the saved Markdown tables and the key rows are matched by: shared by the sweep
report (``report.py``) and the per-context report (``context_report.py``)."""

from __future__ import annotations

import json
import math
from typing import Any


def values_key(values: dict[str, Any]) -> str:
    """A row's axis values as one comparable string (rows with the baseline's values match)."""
    return json.dumps(dict(values), sort_keys=True, default=str)


def plain(value: Any) -> Any:
    """numpy scalars as Python numbers (so integers print as integers), NaN as None."""
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and math.isnan(value) else value


def float_text(value: float) -> str:
    """A float the one way every table writes it: from 1,000 up whole with thousands separators
    (12,346, never 1.235e+04), from 0.001 plain to 4 significant figures (0.5432, 12.35), and
    only below that scientific (1.234e-05), where plain would be zeros."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}" if abs(value) >= 1e-3 else f"{value:.3e}"


def format_cell(value: Any) -> str:
    """Integers with thousands separators, floats as ``float_text``, blanks for none."""
    value = plain(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) >= 1000):
        return f"{int(value):,}"
    if isinstance(value, float):
        return float_text(value)
    return str(value).replace("|", "\\|")

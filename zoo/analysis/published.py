"""zoo's parameter counts beside the ones a model's authors published (``spec.published``),
ours counted under their convention and printed at their precision, so the two read alike."""

from __future__ import annotations

from typing import Any

from zoo.analysis.counts import ParamCount, count_params
from zoo.specs.model import ModelSpec
from zoo.specs.published import ActiveTables

# what zoo's ``active`` counts, said once for `zoo show` and the docs
ACTIVE_CONVENTION = (
    "per token: attention, norms, the router, shared experts and top-k routed experts of every "
    "layer, and the unembedding (LM head); not the input embedding, a lookup (as gpt-oss counts). "
    "active_with_embedding adds the input table (as Mistral and Qwen count); a tied table counts once"
)


def active_under(count: ParamCount, tables: ActiveTables) -> int:
    """Active parameters counting ``tables``: the unembedding only, or both embedding tables."""
    return count.active if tables == "unembedding" else count.active_with_embedding


def published_comparison(spec: ModelSpec) -> dict[str, Any] | None:
    """The published figures and ours under the same convention and rounding (None: none published)."""
    published = spec.published
    if published is None:
        return None
    count = count_params(spec)
    active = active_under(count, published.active_tables)
    return {
        **published.model_dump(),
        "zoo": {
            "total": published.render(count.total, published.total),
            "active": published.render(active, published.active),
            "active_exact": active,
        },
    }

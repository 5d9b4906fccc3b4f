"""Parameter counts a model's authors published, carried by its preset so `zoo show` can put
them beside zoo's own count under the same convention. Kept as printed ("12.9B"): the text
says the precision, and a comparison rounds zoo's count to it, never the other way round."""

from __future__ import annotations

from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FIGURE = r"^\d+(\.\d+)?[KMBT]$"
SCALE = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
# which tables a published "active" figure counts, besides every layer's active parameters
# (attention, norms, router, shared experts and the top-k routed experts)
ActiveTables = Literal["unembedding", "embedding+unembedding"]


class PublishedParams(BaseModel):
    """Total and active parameter counts as the authors printed them, with what the active
    figure counts (``active_tables``), how they rounded, and where they said it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    total: str = Field(pattern=FIGURE, description='as printed, e.g. "46.7B"')
    active: str = Field(pattern=FIGURE, description='as printed, e.g. "12.9B"')
    active_tables: ActiveTables = Field(description="the tables the active figure counts")
    rounding: Literal["nearest", "down"] = Field("nearest", description="how the authors rounded (Qwen truncates)")
    source: str = Field(description="URL of the model card or paper")

    def render(self, count: int, like: str) -> str:
        """``count`` printed as the figure ``like`` was: its unit, decimals and rounding."""
        unit = like[-1]
        decimals = len(like[:-1].partition(".")[2])
        step = Decimal(1).scaleb(-decimals)
        mode = ROUND_DOWN if self.rounding == "down" else ROUND_HALF_UP
        value = (Decimal(count) / SCALE[unit]).quantize(step, rounding=mode)
        return f"{value}{unit}"

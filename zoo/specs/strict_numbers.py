"""Numbers as a spec means them: booleans are not integers, infinities and NaN are refused.

pydantic's lax mode reads ``true`` as 1 for an ``int`` field (so ``--set vocab_size=true``
gave a vocabulary of one token) and accepts ``inf``/``nan`` for floats, which then become
``null`` or bare ``NaN`` in JSON. ``StrictNumbers`` is a base for models built from user
input: ``allow_inf_nan=False`` refuses non-finite floats with the value in the message, and
a validator refuses a boolean for any field that takes numbers but not booleans, and an
integer past ``MAX_INT`` for one that states no bound of its own (``vocab_size: 2**63``
otherwise reached torch's C++ size arithmetic and overflowed there).
"""

from __future__ import annotations

import types
import typing
from typing import Any

import annotated_types
from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic.fields import FieldInfo

MAX_INT = (
    2**31 - 1
)  # every integer of a spec or run: a product of two fits int64; the memory check (Python ints) does the rest


def _parts(annotation: Any) -> list[Any]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _parts(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [p for arg in typing.get_args(annotation) for p in _parts(arg)]
    return [annotation]


def takes_bool_wrongly(annotation: Any) -> bool:
    """True when the annotation takes ints or floats but not booleans."""
    parts = _parts(annotation)
    if any(p is bool or p is Any or typing.get_origin(p) is typing.Literal for p in parts):
        return False
    return any(p in (int, float) for p in parts)


def _own_bound(field: FieldInfo) -> bool:
    """The field states its own upper bound (a seed takes up to 2**64 - 1)."""
    return any(isinstance(m, (annotated_types.Le, annotated_types.Lt)) for m in field.metadata)


def refuse_bool(model: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    if info.field_name is None:
        return value
    field = model.model_fields.get(info.field_name)
    if field is None or not takes_bool_wrongly(field.annotation):
        return value
    if isinstance(value, bool):
        raise ValueError(f"expected a number, not the boolean {str(value).lower()}")
    if isinstance(value, int) and abs(value) > MAX_INT and not _own_bound(field):
        raise ValueError(
            f"{value:,} is out of range; allowed: at most {MAX_INT:,} (so every size zoo computes "
            "from it fits a 64-bit integer)"
        )
    return value


class StrictNumbers(BaseModel):
    """Base for user-facing models: no booleans as numbers, no infinities or NaN."""

    model_config = ConfigDict(allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        return refuse_bool(cls, value, info)

"""Numbers as a spec means them: booleans are not integers, infinities and NaN are refused.

pydantic's lax mode reads ``true`` as 1 for an ``int`` field (so ``--set vocab_size=true``
gave a vocabulary of one token) and accepts ``inf``/``nan`` for floats, which then become
``null`` or bare ``NaN`` in JSON. ``StrictNumbers`` is a base for models built from user
input: ``allow_inf_nan=False`` refuses non-finite floats with the value in the message, and
a validator refuses a boolean for any field that takes numbers but not booleans.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


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


def refuse_bool(model: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    if isinstance(value, bool) and info.field_name is not None:
        field = model.model_fields.get(info.field_name)
        if field is not None and takes_bool_wrongly(field.annotation):
            raise ValueError(f"expected a number, not the boolean {str(value).lower()}")
    return value


class StrictNumbers(BaseModel):
    """Base for user-facing models: no booleans as numbers, no infinities or NaN."""

    model_config = ConfigDict(allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        return refuse_bool(cls, value, info)

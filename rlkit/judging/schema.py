"""The JSON schema a rubric asks a model judge to answer in: one field per dimension whose values are exactly the
dimension's levels. Sent as a server's ``response_format`` or applied in-process by constrained decoding
(``rlkit.lm.constrained``), it makes every answer parse: the 135M judge that left 93% of scores unreadable
leaves none."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlkit.core.rubric import Dimension


def dimension_levels(dim: Dimension) -> list[int] | None:
    """The integer levels a dimension is scored on (0/1 for a binary one, low..high for a scale), or None when its
    range is not whole numbers (then the schema bounds a number instead)."""
    if float(dim.low).is_integer() and float(dim.high).is_integer():
        return list(range(int(dim.low), int(dim.high) + 1))
    return None


def rubric_json_schema(dimensions: Sequence[Dimension]) -> dict[str, Any]:
    """``{"type": "object", "properties": {<dimension>: {"type": "integer", "enum": [levels]}}, ...}`` with every
    dimension required and nothing else allowed (what OpenAI's ``strict`` mode needs too), in the order given."""
    properties: dict[str, Any] = {}
    for dim in dimensions:
        levels = dimension_levels(dim)
        properties[dim.name] = ({"type": "integer", "enum": levels} if levels is not None else
                                {"type": "number", "minimum": dim.low, "maximum": dim.high})
    return {"type": "object", "properties": properties, "required": [d.name for d in dimensions],
            "additionalProperties": False}


__all__ = ["dimension_levels", "rubric_json_schema"]

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


REASON_SUFFIX = "_reason"
REASON_MAX_CHARS = 200  # one line: the ranking note's "a reward with reasons", not an essay that costs tokens


def reason_field(name: str) -> str:
    """The field a dimension's one-line reason is written in: ``<dimension>_reason``."""
    return name + REASON_SUFFIX


def rubric_json_schema(dimensions: Sequence[Dimension], reasons: bool = False) -> dict[str, Any]:
    """``{"type": "object", "properties": {<dimension>: {"type": "integer", "enum": [levels]}}, ...}`` with every
    dimension required and nothing else allowed (what OpenAI's ``strict`` mode needs too), in the order given.

    With ``reasons`` each dimension's level is preceded by ``<dimension>_reason``, a string of at most
    ``REASON_MAX_CHARS`` characters: the judge writes why before it writes the level (Verifiers' RubricJudge asks
    for a reason before each verdict), and a field name that is not the dimension's keeps the level's token
    findable for ``scoring: expected``."""
    properties: dict[str, Any] = {}
    for dim in dimensions:
        if reasons:
            properties[reason_field(dim.name)] = {"type": "string", "maxLength": REASON_MAX_CHARS}
        levels = dimension_levels(dim)
        properties[dim.name] = ({"type": "integer", "enum": levels} if levels is not None else
                                {"type": "number", "minimum": dim.low, "maximum": dim.high})
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


__all__ = ["REASON_MAX_CHARS", "REASON_SUFFIX", "dimension_levels", "reason_field", "rubric_json_schema"]

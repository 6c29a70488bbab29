"""Request bodies read as strict JSON (RFC 8259), and validation errors made safe to send back.

Python's ``json`` reads ``NaN``, ``Infinity`` and ``-Infinity`` literals and turns ``1e999`` into ``inf``; a
request holding one used to fail late and as a server error (the 422 could not serialise the NaN it echoed).
Deep nesting made ``json`` raise ``RecursionError``, and a lone surrogate escape (``"\\ud800"``) made a string UTF-8
cannot encode, which broke the judge. Each is now a 422 that names the field or the position.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 64
"""Nesting levels a request body may have; the reward API's own bodies need 3, an OpenAI chat request a few more."""

# A JSON string (so that brackets inside one are skipped), or a bracket.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
# json joins a valid surrogate pair into one character, so any surrogate left in a string is a lone one.
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class _NonFinite(str):
    """The text of a number literal that has no finite float (NaN, Infinity, -Infinity, 1e999)."""


def _number(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def _error(kind: str, loc: list[Any], msg: str, given: Any = None, **ctx: Any) -> dict[str, Any]:
    error = {"type": kind, "loc": loc, "msg": msg, "input": {} if given is None else given}
    return {**error, "ctx": ctx} if ctx else error


def _too_deep(text: str, max_depth: int) -> dict[str, Any]:
    depth, position = 0, None
    for token in _TOKEN.finditer(text):
        bracket = token.group()
        if bracket in "[{":
            depth += 1
            if depth > max_depth:
                position = token.start()
                break
        elif bracket in "]}":
            depth -= 1
    return _error("json_invalid", ["body"] if position is None else ["body", position],
                  f"JSON nested deeper than {max_depth} levels", max_depth=max_depth)


def is_json_content_type(value: bytes | None) -> bool:
    """Whether FastAPI reads a body with this Content-Type as JSON (no type, ``application/json``, ``*+json``)."""
    if not value:
        return True
    media = value.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def body_problem(body: bytes, max_depth: int = MAX_DEPTH) -> dict[str, Any] | None:
    """Why ``body`` is not strict JSON, as one FastAPI-style validation error (type, loc, msg), or None when it is."""
    try:
        text = body.decode(json.detect_encoding(body))
    except UnicodeDecodeError as exc:
        return _error("json_invalid", ["body", exc.start], "JSON decode error", error=f"not {exc.encoding}")
    try:
        doc = json.loads(text, parse_constant=_NonFinite, parse_float=_number)
    except RecursionError:  # nested deeper than the interpreter's stack allows
        return _too_deep(text, max_depth)
    except json.JSONDecodeError as exc:
        return _error("json_invalid", ["body", exc.pos], "JSON decode error", error=exc.msg)
    except ValueError as exc:  # an integer of more digits than Python converts; the advice after ";" is ours
        return _error("json_invalid", ["body"], "JSON decode error", error=str(exc).split(";")[0])
    # Depth first in document order, without recursion: the first problem a reader would meet is the one named.
    stack: list[tuple[Any, tuple[Any, ...], int]] = [(doc, ("body",), 0)]
    while stack:
        value, loc, depth = stack.pop()
        if isinstance(value, _NonFinite):
            if value.lstrip("-") in ("NaN", "Infinity"):
                msg = f"{value} is not a JSON number; numbers must be finite"
            else:
                msg = "number out of range: it overflows a 64-bit float; numbers must be finite"
            return _error("finite_number", list(loc), msg, str(value))
        if isinstance(value, str) and _SURROGATE.search(value):
            return _error("string_unicode", list(loc), "a lone UTF-16 surrogate escape (\\ud800-\\udfff) is not a "
                                                       "character; strings must be valid Unicode")
        if isinstance(value, dict | list):
            if depth >= max_depth:
                return _too_deep(text, max_depth)
            if isinstance(value, dict):
                bad = next((k for k in value if _SURROGATE.search(k)), None)
                if bad is not None:
                    return _error("string_unicode", [*loc, echoable(bad)], "a lone UTF-16 surrogate escape in a key; "
                                                                           "strings must be valid Unicode")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend(reversed([(v, (*loc, k), depth + 1) for k, v in items]))
    return None


def echoable(value: Any, max_depth: int = MAX_DEPTH) -> Any:
    """``value`` made safe to echo in an error body: non-finite floats and bytes as text, surrogates replaced, depth
    capped."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, str) and _SURROGATE.search(value):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict | list | tuple):
        if max_depth <= 0:
            return "..."
        if isinstance(value, dict):
            return {str(k): echoable(v, max_depth - 1) for k, v in value.items()}
        return [echoable(v, max_depth - 1) for v in value]
    return value

"""Parsing what an LLM judge writes: per-dimension scores (and reasons) against a rubric.

Everything here is a pure function of the text and never raises on what a model writes: an answer that
cannot be read comes back with ``method="none"`` and everything marked missing, so the caller decides
whether that is a retry, a zero reward or a :class:`rlkit.core.errors.JudgeError`.

Scores (:func:`parse_scores`), tried in this order:

1. JSON. Candidates, first to last: the contents of each fenced block (```json or plain ```), the whole
   text, then each balanced ``{...}`` block from the start of the text. The first candidate that yields
   a value for at least one dimension is used. Inside it, the (nested) object with the most dimension
   keys wins, so ``{"scores": {...}}`` works; so does a list ``[{"dimension": "format", "score": 1}]``.
   A value is a number, a numeric string (``"4"``, ``"4/5"``), ``true``/``false`` or ``"yes"``/``"no"``
   (binary dimensions only), or an object with a ``score``/``value``/``rating`` key. Keys match dimension
   names exactly, else case-insensitively with ``-``, ``_`` and spaces ignored.
2. Lenient, per dimension the JSON did not give: the *last* ``name <sep> value`` in the text, where the
   name may be wrapped in markdown or quotes and followed by ``score``/``rating`` or a parenthesised
   note (``**Brevity (1-5):** 4``), and ``<sep>`` is ``:``, ``=`` or a dash (not ``is``: prose such as
   "the brevity is 3 words" would read as a score). The last occurrence
   wins because judges reason first and conclude last. This also reads truncated JSON up to where it
   stops. With a one-dimension rubric only, and only if the name is absent: the last ``[[4]]``, then
   the last ``Score: 4`` (or ``rating``/``grade``), then a text that is nothing but a value.
3. Range check: binary dimensions take exactly 0 or 1, scale dimensions any float in ``[low, high]``
   (never rounded). Anything else goes to ``out_of_range`` and not to ``scores``; a value found out of
   range by JSON is not second-guessed by the lenient pass.

A fraction ``4/5`` or ``4 out of 5`` means 4 on the dimension's own scale, never 0.8; the denominator is
ignored, so ``8/10`` on a 1-5 dimension is out of range rather than silently rescaled to 4.
``method`` is ``"json"`` when the JSON pass gave at least one dimension (the lenient pass may have filled
gaps), ``"lenient"`` when only the lenient pass found something, else ``"none"``.

Rankings are read by :mod:`rlkit.judging.ranking_parsing`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from rlkit.core.rubric import Dimension, Rubric

__all__ = ["ScoreParse", "json_candidates", "normalised_key", "parse_reasons", "parse_scores"]


@dataclass(frozen=True)
class ScoreParse:
    """Scores read from one judge answer. ``scores`` holds only in-range values; every dimension is in exactly
    one of ``scores``, ``out_of_range`` and ``missing``. ``unknown`` lists JSON keys with a score
    that match no dimension (a judge using its own names)."""

    scores: dict[str, float]
    missing: list[str]
    out_of_range: dict[str, float]
    method: str
    unknown: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.missing and not self.out_of_range


# --- shared helpers -----------------------------------------------------------------------------

_FENCE_RE = re.compile(r"```[ \t]*[A-Za-z0-9_+\-]*[ \t]*\n?(.*?)```", re.S)
# Caps the quadratic worst case of scanning for balanced blocks in long, brace-heavy text.
_MAX_BLOCK_STARTS = 32
_FAIL = object()


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _FAIL


def _close_index(text: str, start: int, open_ch: str, close_ch: str) -> int | None:
    # Brackets inside JSON strings must not count, or a reason like "use {x}" would end the block early.
    depth = 0
    in_string = escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i
    return None


def _balanced_blocks(text: str, open_ch: str, close_ch: str) -> Iterator[str]:
    start = text.find(open_ch)
    tries = 0
    while start != -1 and tries < _MAX_BLOCK_STARTS:
        tries += 1
        end = _close_index(text, start, open_ch, close_ch)
        if end is not None:
            yield text[start : end + 1]
        start = text.find(open_ch, start + 1)


def json_candidates(text: str, open_ch: str, close_ch: str, need_quote: bool = False) -> Iterator[Any]:
    """Parsed JSON containers found in ``text``, in the documented order of preference (lazily)."""
    seen: set[str] = set()

    def attempts() -> Iterator[str]:
        for m in _FENCE_RE.finditer(text):
            yield m.group(1).strip()
        yield text.strip()
        yield from _balanced_blocks(text, open_ch, close_ch)

    for chunk in attempts():
        if not chunk or chunk in seen or (need_quote and '"' not in chunk):
            continue
        seen.add(chunk)
        value = _loads(chunk)
        if isinstance(value, dict | list):
            yield value


def normalised_key(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name.strip().lower())


# --- scores -------------------------------------------------------------------------------------

_NUMBER = r"-?[0-9]+(?:\.[0-9]+)?"
# The lookahead stops "4" being read out of "4th" or "4.5x" after backtracking.
_NUM_VALUE = rf"(?P<num>{_NUMBER})(?:\s*(?:/|out\s+of)\s*{_NUMBER})?(?![0-9A-Za-z]|\.[0-9])"
_WORD_VALUE = r"(?P<word>yes|no|true|false|pass(?:ed)?|fail(?:ed)?)\b"
_WORDS = {"yes": 1.0, "true": 1.0, "pass": 1.0, "passed": 1.0, "no": 0.0, "false": 0.0, "fail": 0.0, "failed": 0.0}
_SCORE_KEYS = {"score", "value", "rating", "grade", "points"}
_NAME_KEYS = {"name", "dimension", "criterion", "criteria", "metric", "aspect", "category", "key"}
_MARKUP = r"[\*_\"'`]{0,4}"
_AFTER_NAME = rf"(?:[\s_\-]{{0,3}}(?:score|rating))?{_MARKUP}[ \t]{{0,4}}(?:\([^()\n]{{0,30}}\))?{_MARKUP}[ \t]{{0,4}}"
_SEPARATOR = r"(?:[:=]|[-\u2013\u2014])"
# "{"score": " lets the lenient pass read a truncated {"brevity": {"score": 4, "reason": "...
_BEFORE_VALUE = r"[\s\*_\"'`\[\(]{0,12}(?:\{\s{0,4}[\"']?(?:score|value|rating)[\"']?\s{0,4}:\s{0,4})?"


def _value_pattern(binary: bool) -> str:
    return f"(?:{_NUM_VALUE}|{_WORD_VALUE})" if binary else f"(?:{_NUM_VALUE})"


@lru_cache(maxsize=256)
def _dimension_re(name: str, binary: bool) -> re.Pattern[str]:
    parts = [re.escape(p) for p in re.split(r"[\s_\-]+", name.strip()) if p]
    name_re = r"[\s_\-]*".join(parts) or re.escape(name)
    return re.compile(
        rf"(?<![A-Za-z0-9]){name_re}{_AFTER_NAME}{_SEPARATOR}{_BEFORE_VALUE}{_value_pattern(binary)}", re.I
    )


@lru_cache(maxsize=4)
def _single_res(binary: bool) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    value = _value_pattern(binary)
    brackets = re.compile(rf"\[\[[ \t]{{0,4}}{value}[ \t]{{0,4}}\]\]", re.I)
    labelled = re.compile(
        rf"(?<![A-Za-z0-9])(?:score|rating|grade){_MARKUP}[ \t]{{0,4}}(?:\([^()\n]{{0,30}}\))?{_MARKUP}[ \t]{{0,4}}"
        rf"[:=]{_BEFORE_VALUE}{value}",
        re.I,
    )
    bare = re.compile(rf"[\*\[\(]{{0,4}}[ \t]{{0,2}}{value}[ \t]{{0,2}}[\*\]\)]{{0,4}}\.?", re.I)
    return brackets, labelled, bare


@lru_cache(maxsize=4)
def _text_value_re(binary: bool) -> re.Pattern[str]:
    return re.compile(rf"\s*[\*\[\(]{{0,4}}[ \t]{{0,2}}{_value_pattern(binary)}", re.I)


def _to_float(x: int | float | str) -> float:
    try:
        return float(x)
    except OverflowError:
        # A judge writing 10**400 is out of range, not a crash.
        return -math.inf if str(x).lstrip().startswith("-") else math.inf


def _match_value(m: re.Match[str]) -> float:
    word = m.groupdict().get("word")
    if word:
        return _WORDS[word.lower()]
    return _to_float(m.group("num"))


def _json_value(raw: Any, dim: Dimension, nested: bool = False) -> float | None:
    if isinstance(raw, bool):
        return float(raw) if dim.type == "binary" else None
    if isinstance(raw, int | float):
        return _to_float(raw)
    if isinstance(raw, str):
        m = _text_value_re(dim.type == "binary").match(raw)
        return _match_value(m) if m else None
    if isinstance(raw, dict) and not nested:
        for key, value in raw.items():
            if isinstance(key, str) and normalised_key(key) in _SCORE_KEYS:
                return _json_value(value, dim, nested=True)
    return None


class _Dimensions:
    """Looks up a judge's key: the exact name first, then the normalised one when it is unambiguous."""

    def __init__(self, rubric: Rubric) -> None:
        self.dims = list(rubric.dimensions)
        self.exact = {d.name: d for d in self.dims}
        by_norm: dict[str, list[Dimension]] = {}
        for d in self.dims:
            by_norm.setdefault(normalised_key(d.name), []).append(d)
        self.normed = {k: v[0] for k, v in by_norm.items() if len(v) == 1}

    def get(self, key: Any) -> Dimension | None:
        if not isinstance(key, str):
            return None
        return self.exact.get(key) or self.normed.get(normalised_key(key))


def _score_dicts(obj: Any, depth: int = 0) -> Iterator[dict[Any, Any]]:
    """Every object that might hold the scores, outermost first; a list of named entries becomes one."""
    if depth > 4:
        return
    if isinstance(obj, dict):
        yield obj
        for value in obj.values():
            yield from _score_dicts(value, depth + 1)
    elif isinstance(obj, list):
        merged: dict[Any, Any] = {}
        for item in obj:
            if isinstance(item, dict):
                name = next((v for k, v in item.items() if isinstance(k, str) and normalised_key(k) in _NAME_KEYS),
                            None)
                if isinstance(name, str):
                    merged.setdefault(name, item)
        if merged:
            yield merged
        for item in obj:
            yield from _score_dicts(item, depth + 1)


def _scores_from_json(obj: Any, dims: _Dimensions) -> tuple[dict[str, float], list[str]]:
    best: dict[str, float] = {}
    best_dict: dict[Any, Any] | None = None
    for candidate in _score_dicts(obj):
        found: dict[str, float] = {}
        for key, raw in candidate.items():
            dim = dims.get(key)
            if dim is not None and dim.name not in found:
                value = _json_value(raw, dim)
                if value is not None:
                    found[dim.name] = value
        if len(found) > len(best):
            best, best_dict = found, candidate
    if not best and len(dims.dims) == 1:
        # A one-dimension judge often answers {"score": 4, "reason": ...} without naming the dimension.
        dim = dims.dims[0]
        for candidate in _score_dicts(obj):
            key = next((k for k in candidate if isinstance(k, str) and normalised_key(k) in _SCORE_KEYS), None)
            value = _json_value(candidate[key], dim) if key is not None else None
            if value is not None:
                return {dim.name: value}, []
    if best_dict is None:
        best_dict = next((d for d in _score_dicts(obj) if any(_looks_numeric(v) for v in d.values())), None)
    unknown = [
        str(k) for k, v in (best_dict or {}).items()
        if dims.get(k) is None and _looks_numeric(v) and not (isinstance(k, str) and normalised_key(k) in _SCORE_KEYS)
    ]
    return best, unknown


def _looks_numeric(raw: Any) -> bool:
    if isinstance(raw, bool):
        return False
    if isinstance(raw, int | float):
        return True
    if isinstance(raw, str):
        return _text_value_re(False).fullmatch(raw.strip()) is not None
    if isinstance(raw, dict):
        return any(isinstance(k, str) and normalised_key(k) in _SCORE_KEYS for k in raw)
    return False


def _last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    last = None
    for last in pattern.finditer(text):  # noqa: B007 - only the last match is wanted
        pass
    return last


def _lenient_value(text: str, dim: Dimension, single: bool) -> float | None:
    binary = dim.type == "binary"
    last = _last_match(_dimension_re(dim.name, binary), text)
    if last is not None:
        return _match_value(last)
    if not single:
        return None
    brackets, labelled, bare = _single_res(binary)
    for pattern in (brackets, labelled):
        last = _last_match(pattern, text)
        if last is not None:
            return _match_value(last)
    m = bare.fullmatch(text.strip())
    return _match_value(m) if m else None


def _in_range(value: float, dim: Dimension) -> bool:
    if not math.isfinite(value):
        return False
    if dim.type == "binary":
        return value in (0.0, 1.0)
    return dim.low <= value <= dim.high


def parse_scores(text: str, rubric: Rubric) -> ScoreParse:
    """Read one score per rubric dimension from a judge's answer (see the module docstring for the order
    of attempts and the conventions). Never raises on the content of ``text``."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    dims = _Dimensions(rubric)
    from_json: dict[str, float] = {}
    unknown: list[str] = []
    for obj in json_candidates(text, "{", "}"):
        found, names = _scores_from_json(obj, dims)
        if not unknown:
            unknown = names
        if found:
            from_json, unknown = found, names
            break
    raw: dict[str, float] = dict(from_json)
    single = len(dims.dims) == 1
    for dim in dims.dims:
        if dim.name not in raw:
            value = _lenient_value(text, dim, single)
            if value is not None:
                raw[dim.name] = value
    scores: dict[str, float] = {}
    out_of_range: dict[str, float] = {}
    missing: list[str] = []
    for dim in dims.dims:
        if dim.name not in raw:
            missing.append(dim.name)
        elif _in_range(raw[dim.name], dim):
            scores[dim.name] = raw[dim.name]
        else:
            out_of_range[dim.name] = raw[dim.name]
    method = "json" if from_json else "lenient" if raw else "none"
    return ScoreParse(scores=scores, missing=missing, out_of_range=out_of_range, method=method, unknown=unknown)


_REASON_KEYS = ("reason", "reasoning", "explanation", "rationale", "why")


def parse_reasons(text: str, rubric: Rubric) -> dict[str, str]:
    """Each dimension's one-line reason from a judge's answer: a ``"<dimension>_reason"`` string beside the score
    (the structured schema's form, ``rlkit.judging.schema.reason_field``) or a ``reason`` inside the dimension's own
    object (``{"brevity": {"score": 4, "reason": ...}}``); newlines become spaces. Dimensions without one are left
    out. Never raises on the content of ``text``."""
    if not isinstance(text, str):
        return {}
    wanted = {normalised_key(dim.name + "_reason"): dim.name for dim in rubric.dimensions}
    own = {normalised_key(dim.name): dim.name for dim in rubric.dimensions}
    for obj in json_candidates(text, "{", "}"):
        found: dict[str, str] = {}
        for candidate in _score_dicts(obj):
            for key, value in candidate.items():
                if not isinstance(key, str):
                    continue
                name = wanted.get(normalised_key(key))
                if name is None and isinstance(value, dict) and normalised_key(key) in own:
                    name = own[normalised_key(key)]
                    value = next((v for k, v in value.items()
                                  if isinstance(k, str) and normalised_key(k) in _REASON_KEYS), None)
                if name is not None and isinstance(value, str) and value.strip() and name not in found:
                    found[name] = " ".join(value.split())
        if found:
            return found
    return {}

"""The built-in ``rule`` judge: scores dimensions from declarative checks listed in the rubric."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rlkit import JudgeError, Rollout, Rubric, RubricError, hookimpl

NAN = float("nan")
_FENCE = re.compile(r"```json[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
# A '-' right after a word character is a range or hyphen ("10-20"), not a sign.
_NUMBER = re.compile(r"(?:(?<!\w)-)?(?:\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")

CheckFn = Callable[[str, dict[str, Any], "int | None"], float]


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


_STR = (lambda v: isinstance(v, str) and v != ""), "a non-empty string"
_STRS = (lambda v: isinstance(v, list) and bool(v) and all(isinstance(s, str) and s for s in v),
         "a non-empty list of non-empty strings")
_BOOL = (lambda v: isinstance(v, bool)), "true or false"
_NONNEG = (lambda v: _num(v) and v >= 0), "a number >= 0"
_VALUES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "pattern": _STR, "extract": _STR, "field": _STR, "absent": _BOOL, "case_sensitive": _BOOL,
    "any": _STRS, "all": _STRS, "none": _STRS, "required_keys": _STRS,
    "min": _NONNEG, "max": _NONNEG, "tolerance": _NONNEG,
    "weight": ((lambda v: _num(v) and v > 0), "a number > 0"),
    "n": ((lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1), "an integer >= 1"),
    "max_ratio": ((lambda v: _num(v) and 0 <= v <= 1), "a number in [0, 1]"),
    "unit": ((lambda v: v in ("chars", "words", "tokens")), "one of chars, words, tokens"),
    "mode": ((lambda v: v in ("exact", "numeric")), "one of exact, numeric"),
}
# type -> (required keys, optional keys); every check also takes `type` and `weight`.
_TYPES: dict[str, tuple[set[str], set[str]]] = {
    "regex": ({"pattern"}, {"absent", "case_sensitive"}),
    "keywords": (set(), {"any", "all", "none", "case_sensitive"}),
    "length": (set(), {"min", "max", "unit"}),
    "repetition": (set(), {"n", "max_ratio"}),
    "json": (set(), {"required_keys"}),
    "match": (set(), {"field", "mode", "case_sensitive", "extract", "tolerance"}),
}


@dataclass(frozen=True)
class _DimPlan:
    where: str
    binary: bool
    low: float
    high: float
    checks: list[tuple[float, CheckFn]]  # (weight, check)
    needs_tokens: bool


def _regex(pattern: str, case_sensitive: bool, where: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, 0 if case_sensitive else re.IGNORECASE)
    except re.error as exc:
        raise RubricError(f"invalid regex {pattern!r}: {exc}", where) from None


def _validate(check: dict[str, Any], where: str) -> str:
    """Check keys and values of one check; return its type."""
    kind = check.get("type")
    if kind not in _TYPES:
        got = "no type" if kind is None else f"unknown check type {kind!r}"
        raise RubricError(f"{got}; valid types: {', '.join(sorted(_TYPES))}", f"{where}.type")
    required, optional = _TYPES[kind]
    valid = required | optional | {"type", "weight"}
    for key in check:
        if key not in valid:
            raise RubricError(f"unknown key {key!r} for a {kind} check; valid keys: "
                              f"{', '.join(sorted(valid))}", f"{where}.{key}")
    for key in sorted(required - set(check)):
        raise RubricError(f"a {kind} check needs {key!r}", f"{where}.{key}")
    for key, value in check.items():
        if key in _VALUES and not _VALUES[key][0](value):
            raise RubricError(f"must be {_VALUES[key][1]}, got {value!r}", f"{where}.{key}")
    if kind == "keywords" and sum(k in check for k in ("any", "all", "none")) != 1:
        raise RubricError("a keywords check needs exactly one of any, all, none", where)
    if kind == "length":
        if "min" not in check and "max" not in check:
            raise RubricError("a length check needs min, max or both", where)
        if check.get("min", 0) > check.get("max", math.inf):
            raise RubricError(f"min ({check['min']}) is greater than max ({check['max']})", f"{where}.min")
    if kind == "match" and check.get("mode", "exact") == "exact":
        for key in sorted({"extract", "tolerance"} & set(check)):
            raise RubricError(f"{key} applies only to mode: numeric", f"{where}.{key}")
    return kind


def _is_json(text: str, keys: list[str]) -> bool:
    """Whether the text, or its single ```json block, parses (as an object holding ``keys``, if any)."""
    blocks = _FENCE.findall(text)
    for candidate in [text.strip(), *(blocks if len(blocks) == 1 else [])]:
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        return not keys or (isinstance(data, dict) and all(k in data for k in keys))
    return False


def _repetition(text: str, n: int) -> float:
    """1 - unique / total word n-grams; 0 when the text has fewer than n words."""
    words = text.casefold().split()  # "The" and "the" repeat the same word
    total = len(words) - n + 1
    if total <= 0:
        return 0.0
    # zip of n shifted views makes the n-grams without slicing a list per position
    return 1 - len(set(zip(*(words[i:] for i in range(n)), strict=False))) / total


def _to_float(text: str) -> float | None:
    try:
        value = float(text.strip().replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _build(kind: str, c: dict[str, Any], case_sensitive: bool, where: str) -> CheckFn:
    """Turn a validated check into a function (text, record, token_count) -> 1.0 / 0.0 / NaN."""
    cs = c.get("case_sensitive", case_sensitive)
    fold: Callable[[str], str] = (lambda s: s) if cs else str.casefold
    if kind == "regex":
        pat, absent = _regex(c["pattern"], cs, f"{where}.pattern"), c.get("absent", False)
        return lambda text, rec, tok: float((pat.search(text) is not None) != absent)
    if kind == "keywords":
        mode = next(k for k in ("any", "all", "none") if k in c)
        words = [fold(w) for w in c[mode]]
        def keywords(text: str, rec: dict[str, Any], tok: int | None) -> float:
            folded = fold(text)
            hits = [w in folded for w in words]
            return float(any(hits) if mode == "any" else all(hits) if mode == "all" else not any(hits))
        return keywords
    if kind == "length":
        unit, lo, hi = c.get("unit", "chars"), c.get("min", 0), c.get("max", math.inf)
        def length(text: str, rec: dict[str, Any], tok: int | None) -> float:
            size = len(text) if unit == "chars" else len(text.split()) if unit == "words" else tok
            return float(lo <= size <= hi)
        return length
    if kind == "repetition":
        n, max_ratio = c.get("n", 3), c.get("max_ratio", 0.2)
        return lambda text, rec, tok: float(_repetition(text, n) <= max_ratio)
    if kind == "json":
        keys = c.get("required_keys", [])
        return lambda text, rec, tok: float(_is_json(text, keys))
    field, numeric = c.get("field", "reference"), c.get("mode", "exact") == "numeric"
    extract, tol = c.get("extract"), c.get("tolerance", 1e-6)
    pat = _regex(extract, cs, f"{where}.extract") if extract else None
    if pat is not None and pat.groups < 1:
        raise RubricError("extract needs a capture group around the number", f"{where}.extract")

    def match(text: str, rec: dict[str, Any], tok: int | None) -> float:
        ref = rec.get(field)
        if ref is None:
            return NAN  # this prompt has nothing to compare against
        if not numeric:
            return float(fold(text.strip()) == fold(str(ref).strip()))
        target = None if isinstance(ref, bool) else _to_float(str(ref))
        if target is None:
            raise JudgeError(f"field {field!r} of the prompt record is not a number: {ref!r}", where)
        if pat is not None:
            found = pat.search(text)
            value = _to_float(found.group(1) or "") if found else None
        else:
            numbers = _NUMBER.findall(text)
            value = _to_float(numbers[-1]) if numbers else None
        return 0.0 if value is None else float(abs(value - target) <= tol)

    return match


class RuleJudge:
    """Scores each dimension as the (weighted) share of its declarative checks that pass."""

    @dataclass
    class Params:
        case_sensitive: bool = False

    def __init__(self, params: RuleJudge.Params | None = None) -> None:
        self.params = params or RuleJudge.Params()
        self._plans: dict[tuple[str, str | None], list[_DimPlan | None]] = {}

    def _plan(self, rubric: Rubric) -> list[_DimPlan | None]:
        # The source is part of the key so error locations name the file actually in use.
        key = (rubric.content_hash, rubric.source)
        if key not in self._plans:
            self._plans[key] = [self._plan_dimension(rubric, i) for i in range(len(rubric.dimensions))]
        return self._plans[key]

    def _plan_dimension(self, rubric: Rubric, i: int) -> _DimPlan | None:
        dim = rubric.dimensions[i]
        if dim.judge not in (None, "rule"):
            return None  # another judge scores it (hybrid routing)
        at = f"{rubric.source or '<rubric>'}: dimensions[{i}]({dim.name})"
        if not dim.checks:
            raise RubricError("the rule judge needs `checks` to score this dimension; add some, "
                              "or set `judge:` to another judge", f"{at}.checks")
        checks, needs_tokens = [], False
        for j, check in enumerate(dim.checks):
            kind = _validate(check, f"{at}.checks[{j}]")
            checks.append((float(check.get("weight", 1.0)),
                           _build(kind, check, self.params.case_sensitive, f"{at}.checks[{j}]")))
            needs_tokens |= kind == "length" and check.get("unit") == "tokens"
        return _DimPlan(at, dim.type == "binary", dim.low, dim.high, checks, needs_tokens)

    def check_rubric(self, rubric: Rubric) -> None:
        """Raise RubricError for any dimension this judge should score but cannot."""
        self._plan(rubric)

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        """Raw scores float32 [B, G, D] in each dimension's range; NaN where no check applies."""
        plan = self._plan(rubric)
        b_size, g_size, d_size = rollout.num_prompts, rollout.group_size, len(rubric.dimensions)
        counts = rollout.completion_token_counts
        for dim in plan:
            if counts is None and dim is not None and dim.needs_tokens:
                raise JudgeError("a length check with unit: tokens needs rollout.completion_token_counts, "
                                 "which is None", dim.where)
        if counts is not None and tuple(counts.shape) != (b_size, g_size):
            raise JudgeError(f"completion_token_counts must be [{b_size}, {g_size}], "
                             f"got {list(counts.shape)}")
        count_rows = counts.tolist() if counts is not None else None
        items = [(text, record, int(count_rows[b][g]) if count_rows is not None else None)
                 for b, (record, group) in enumerate(zip(rollout.records, rollout.completions, strict=True))
                 for g, text in enumerate(group)]
        # Identical completions of one prompt (common once a policy converges) are scored once.
        position: dict[tuple[str, int, int | None], int] = {}
        distinct: list[tuple[str, dict[str, Any], int | None]] = []
        index = []
        for item in items:
            key = (item[0], id(item[1]), item[2])
            if key not in position:
                position[key] = len(distinct)
                distinct.append(item)
            index.append(position[key])
        columns = [_score_dimension(dim, distinct) for dim in plan]
        return torch.stack(columns, dim=1)[torch.tensor(index, dtype=torch.long)].reshape(b_size, g_size, d_size)


def _score_dimension(dim: _DimPlan | None, items: list[tuple[str, dict[str, Any], int | None]]) -> torch.Tensor:
    """One dimension's scores ``[N]`` for (text, record, token count) items: checks run per item, their
    combination (the weighted share that passed, mapped to the range; all-pass for binary) over all at once."""
    if dim is None:
        return torch.full((len(items),), NAN)
    values = torch.tensor([[run(text, record, tok) for _, run in dim.checks] for text, record, tok in items],
                          dtype=torch.float64).reshape(len(items), len(dim.checks))
    weights = torch.tensor([w for w, _ in dim.checks], dtype=torch.float64)
    applicable = ~torch.isnan(values)
    none = ~applicable.any(dim=1)
    if dim.binary:
        out = torch.where(applicable, values == 1.0, True).all(dim=1).to(torch.float64)
    else:
        w = weights * applicable
        share = (w * values.nan_to_num(0.0)).sum(dim=1) / w.sum(dim=1).clamp(min=1e-300)
        out = dim.low + share * (dim.high - dim.low)
    return torch.where(none, NAN, out).to(torch.float32)


@hookimpl
def rlkit_register_judges(register: Callable[..., None]) -> None:
    """Register the ``rule`` judge."""
    register("rule", RuleJudge)

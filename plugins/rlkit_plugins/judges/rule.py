"""The built-in ``rule`` judge: scores dimensions from declarative checks listed in the rubric.

With ``rubric=per_record`` each record is scored against its own per-prompt rubric, whose criteria carry the checks
(``rlkit_plugins.judges.per_record``)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any

from rlkit.plugin import JudgeError, Judgement, RecordField, Rollout, Rubric, RubricError, hookimpl
from rlkit_plugins.judges import rule_features as rf
from rlkit_plugins.judges.per_record import (
    RecordRubrics,
    absent_categories,
    check_frame,
    check_record_rubrics,
    score_per_record,
)
from rlkit_plugins.judges.rule_features import Batch, BatchCheck

if TYPE_CHECKING:
    import numpy as np
    import torch

NAN = float("nan")


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


_STR = (lambda v: isinstance(v, str) and v != ""), "a non-empty string"
_STRS = (lambda v: isinstance(v, list) and bool(v) and all(isinstance(s, str) and s for s in v),
         "a non-empty list of non-empty strings")
# keywords' any / all / none: the words, or where in the record to read them
_WORDS = (lambda v: _STRS[0](v) or (isinstance(v, dict) and set(v) == {"field"} and _STR[0](v["field"])),
          "a non-empty list of non-empty strings, or {field: NAME} to read them from the record")
_BOOL = (lambda v: isinstance(v, bool)), "true or false"
_NONNEG = (lambda v: _num(v) and v >= 0), "a number >= 0"
_VALUES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "pattern": _STR, "extract": _STR, "field": _STR, "key": _STR, "absent": _BOOL, "case_sensitive": _BOOL,
    "any": _WORDS, "all": _WORDS, "none": _WORDS, "required_keys": _STRS,
    "min": _NONNEG, "max": _NONNEG, "tolerance": _NONNEG,
    "weight": ((lambda v: _num(v) and v > 0), "a number > 0"),
    "n": ((lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1), "an integer >= 1"),
    "max_ratio": ((lambda v: _num(v) and 0 <= v <= 1), "a number in [0, 1]"),
    "unit": ((lambda v: v in ("chars", "words", "tokens")), "one of chars, words, tokens"),
    "mode": ((lambda v: v in ("exact", "numeric", "contains")), "one of exact, numeric, contains"),
    "max_len": ((lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1), "an integer >= 1"),
    "cache": ((lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1), "an integer >= 1"),
}
# type -> (required keys, optional keys); every check also takes `type` and `weight`.
_TYPES: dict[str, tuple[set[str], set[str]]] = {
    "regex": ({"pattern"}, {"absent", "case_sensitive"}),
    "keywords": (set(), {"any", "all", "none", "case_sensitive"}),
    "length": (set(), {"min", "max", "unit"}),
    "repetition": (set(), {"n", "max_ratio"}),
    "json": (set(), {"required_keys"}),
    "match": (set(), {"field", "mode", "case_sensitive", "extract", "tolerance"}),
    "overlong": ({"max_len", "cache"}, {"unit"}),
    "sentences": (set(), {"min", "max"}),
    "episode": ({"key"}, {"min", "max"}),  # a count a multi-turn environment reported (Episode.info)
}


@dataclass(frozen=True)
class _DimPlan:
    where: str
    binary: bool
    low: float
    high: float
    checks: list[tuple[float, BatchCheck]]  # (weight, check over a whole batch)
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
    if kind in ("length", "sentences", "episode") and "min" not in check and "max" not in check:
        raise RubricError(f"{'an' if kind == 'episode' else 'a'} {kind} check needs min, max or both", where)
    if kind in ("length", "sentences") and check.get("min", 0) > check.get("max", math.inf):
        raise RubricError(f"min ({check['min']}) is greater than max ({check['max']})", f"{where}.min")
    if kind == "overlong" and check["cache"] > check["max_len"]:
        raise RubricError(f"cache ({check['cache']}) is greater than max_len ({check['max_len']})", f"{where}.cache")
    if kind == "match" and check.get("mode", "exact") != "numeric" and "tolerance" in check:
        raise RubricError("tolerance applies only to mode: numeric", f"{where}.tolerance")
    return kind


def _build(kind: str, c: dict[str, Any], case_sensitive: bool, where: str) -> BatchCheck:
    """Turn a validated check into a function batch -> float64 [N] of 1.0 / 0.0 / NaN."""
    cs = c.get("case_sensitive", case_sensitive)
    if kind == "regex":
        return rf.regex_check(_regex(c["pattern"], cs, f"{where}.pattern"), c.get("absent", False))
    if kind == "keywords":
        mode = next(k for k in ("any", "all", "none") if k in c)
        if isinstance(c[mode], dict):
            return rf.record_keywords_check(mode, c[mode]["field"], cs, where)
        return rf.keywords_check(mode, [w if cs else w.casefold() for w in c[mode]], cs)
    if kind == "length":
        return rf.length_check(c.get("unit", "chars"), c.get("min", 0), c.get("max", math.inf))
    if kind == "repetition":
        return rf.repetition_check(c.get("n", 3), c.get("max_ratio", 0.2))
    if kind == "json":
        return rf.json_check(c.get("required_keys", []))
    if kind == "overlong":
        return rf.overlong_check(c.get("unit", "tokens"), c["max_len"], c["cache"])
    if kind == "episode":
        return rf.episode_check(c["key"], c.get("min", -math.inf), c.get("max", math.inf))
    if kind == "sentences":
        return rf.sentences_check(c.get("min", 0), c.get("max", math.inf))
    extract = c.get("extract")
    pat = _regex(extract, cs, f"{where}.extract") if extract else None
    if pat is not None and pat.groups < 1:
        raise RubricError("extract needs a capture group (around the number, or the text to compare)",
                          f"{where}.extract")
    return rf.match_check(c.get("field", "reference"), c.get("mode", "exact"), cs, pat, c.get("tolerance", 1e-6),
                          where)


class RuleJudge:
    """Scores each dimension as the (weighted) share of its declarative checks that pass."""

    scores_per_record = True  # takes rubric=per_record: each record against its own rubric (judges.per_record)

    @dataclass
    class Params:
        case_sensitive: bool = False

    def __init__(self, params: RuleJudge.Params | None = None) -> None:
        self.params = params or RuleJudge.Params()
        self._plans: dict[tuple[str, str | None], list[_DimPlan | None]] = {}
        self._record_rubrics = RecordRubrics()

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
            needs_tokens |= (kind == "length" and check.get("unit") == "tokens") or (
                kind == "overlong" and check.get("unit", "tokens") == "tokens")
        return _DimPlan(at, dim.type == "binary", dim.low, dim.high, checks, needs_tokens)

    def check_rubric(self, rubric: Rubric) -> None:
        """Raise RubricError for any dimension this judge should score but cannot."""
        if rubric.per_record:
            check_frame(rubric, "rule")  # each record's own criteria: check_records, and as each is scored
            return
        self._plan(rubric)

    def record_fields(self, rubric: Rubric) -> list[RecordField]:
        """The record field each ``match`` check compares with (``reference`` unless it names another), and each
        ``keywords`` check reads its words from (``any: {field: NAME}``)."""
        if rubric.per_record:
            return []  # each record carries its own criteria, checked as it is scored
        source = rubric.source or "<rubric>"
        return [RecordField(name, dim.name, f"{source}: dimension {dim.name}, checks[{j}] ({check.get('type')})")
                for dim in rubric.dimensions if dim.judge in (None, "rule")
                for j, check in enumerate(dim.checks or []) if (name := _record_field(check)) is not None]

    def check_records(self, records: Sequence[dict[str, Any]], rubric: Rubric) -> None:
        """With a per_record rubric: every record's own rubric loads and its checks are valid, as scoring would find."""
        if rubric.per_record:
            check_record_rubrics(records, self._record_rubrics, self._plan)

    def not_applicable(self, records: Sequence[dict[str, Any]], rubric: Rubric) -> list[str]:
        """With a per_record rubric: the frame's category dimensions no record's rubric has a criterion for."""
        return absent_categories(records, rubric, self._record_rubrics) if rubric.per_record else []

    def assess(self, rollout: Rollout, rubric: Rubric) -> Judgement:
        """The scores alone: checks give no reasons, make no calls and have nothing to report."""
        return Judgement(self.score(rollout, rubric))

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        """Raw scores float32 [B, G, D] in each dimension's range; NaN where no check applies."""
        import numpy as np
        import torch
        if rubric.per_record:
            return score_per_record(rollout, rubric, self._record_rubrics, self.score)
        plan = self._plan(rubric)
        b_size, g_size, d_size = rollout.num_prompts, rollout.group_size, len(rubric.dimensions)
        counts = rollout.completion_token_counts
        for dim in plan:
            if counts is None and dim is not None and dim.needs_tokens:
                raise JudgeError("a length or overlong check with unit: tokens needs rollout.completion_token_counts, "
                                 "which is None", dim.where)
        if counts is not None and tuple(counts.shape) != (b_size, g_size):
            raise JudgeError(f"completion_token_counts must be [{b_size}, {g_size}], "
                             f"got {list(counts.shape)}")
        texts = [text for group in rollout.completions for text in group]
        records = [record for record in rollout.records for _ in range(g_size)]
        tokens = [int(n) for row in counts.tolist() for n in row] if counts is not None else None
        infos = [e.info for group in rollout.episodes for e in group] if rollout.episodes is not None else None
        # Identical completions of one prompt (common once a policy converges) are scored once; an episode's
        # counts are part of what makes two completions identical.
        position: dict[tuple[Any, ...], int] = {}
        keys = zip(texts, map(id, records), tokens if tokens is not None else repeat(None),
                   map(id, infos) if infos is not None else repeat(None), strict=False)
        index = [position.setdefault(key, len(position)) for key in keys]  # the length before any insertion
        if len(position) < len(index):
            firsts = np.unique(np.asarray(index), return_index=True)[1].tolist()
            texts, records = [texts[i] for i in firsts], [records[i] for i in firsts]
            tokens = [tokens[i] for i in firsts] if tokens is not None else None
            infos = [infos[i] for i in firsts] if infos is not None else None
        batch = Batch(texts, records, tokens, infos)
        columns = np.stack([_score_dimension(dim, batch) for dim in plan], axis=1)
        return torch.from_numpy(columns[np.asarray(index, dtype=np.int64)]).reshape(b_size, g_size, d_size)


def _record_field(check: dict[str, Any]) -> str | None:
    """The record field a check reads, if any."""
    if check.get("type") == "match":
        return str(check.get("field", "reference"))
    if check.get("type") == "keywords":
        words = next((check[k] for k in ("any", "all", "none") if k in check), None)
        return str(words["field"]) if isinstance(words, dict) and "field" in words else None
    return None


def _score_dimension(dim: _DimPlan | None, batch: Batch) -> np.ndarray:
    """One dimension's scores float32 ``[N]``: each check over the whole batch, then their combination."""
    import numpy as np
    if dim is None:
        return np.full(batch.size, NAN, dtype=np.float32)
    values = np.stack([run(batch) for _, run in dim.checks], axis=1).reshape(batch.size, len(dim.checks))
    passed, missing = values == 1.0, np.isnan(values)
    if len(dim.checks) > 30 or not (passed | missing | (values == 0.0)).all():
        return _combine(dim, values)
    # A row's score depends only on which checks passed, failed or did not apply: combine each such pattern
    # once. Besides saving work, the small tensor keeps torch off its thread pool, which cost ~3 µs per row
    # per dimension on a busy 2-core machine.
    bits = 1 << np.arange(len(dim.checks), dtype=np.int64)
    codes = (passed @ bits) | ((missing @ bits) << len(dim.checks))
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    table = values[np.append(first, first[:1])]  # >= 2 rows: the same 2-D reduction as over the whole batch
    return _combine(dim, table)[:-1][inverse.reshape(-1)]


def _combine(dim: _DimPlan, values: np.ndarray) -> np.ndarray:
    """The weighted share of checks that passed per row ``[N, C]``, mapped to the range; all-pass for binary;
    NaN where no check applies."""
    import torch
    values = torch.from_numpy(values)
    weights = torch.tensor([w for w, _ in dim.checks], dtype=torch.float64)
    applicable = ~torch.isnan(values)
    none = ~applicable.any(dim=1)
    if dim.binary:
        out = torch.where(applicable, values == 1.0, True).all(dim=1).to(torch.float64)
    else:
        w = weights * applicable
        share = (w * values.nan_to_num(0.0)).sum(dim=1) / w.sum(dim=1).clamp(min=1e-300)
        out = dim.low + share * (dim.high - dim.low)
    return torch.where(none, NAN, out).to(torch.float32).numpy()


@hookimpl
def rlkit_register_judges(register: Callable[..., None]) -> None:
    """Register the ``rule`` judge."""
    register("rule", RuleJudge)

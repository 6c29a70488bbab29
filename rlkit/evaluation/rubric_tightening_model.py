"""``rlkit rubric tighten`` with a model backend (``tighten.backend``): the anchors of each saturated dimension (and of
each part of a split one) written by a model from the run's top-scored and lowest-scored samples.

The backend is a judge backend (``rlkit_register_judge_backends``: ``openai``, ``llama_cpp``, ``hf``), configured as
the ``llm`` judge's ``backend`` is (``{name: openai, params: {base_url: ..., model: ...}}``) and built by the same
registry; it writes from ``templates/rubric/tighten.jinja``. Where the backend constrains answers to a JSON schema
(``structured_outputs``) each request carries :func:`anchor_schema`; every answer, constrained or not, is validated by
:func:`parse_anchors` against the same shape. A malformed answer is asked again with what is wrong, as many times as
the backend's own ``max_retries`` (1 for a backend without one); what still fails is one :class:`DataError` naming
the dimension and the problem, raised before anything is written.

The checks stay the rules' (:mod:`rlkit.evaluation.rubric_tightening`): the rule judge reads checks, never anchors,
so anchors alone would not make a rule-judged dimension harder.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlkit.core.errors import DataError
from rlkit.core.templates import render_file, template_hash
from rlkit.evaluation.reasking import ask_until_parsed

TEMPLATE = "rubric/tighten.jinja"
MAX_SAMPLES = 5        # top and lowest samples shown per dimension: enough contrast, a prompt a small model reads
MAX_TEXT = 300         # characters of an anchor's text
MAX_EXAMPLES = 3       # positive and negative examples per anchor
MAX_EXAMPLE_CHARS = 200
SHOWN_CHARS = 400      # characters of a sample shown in the prompt
DEFAULT_RETRIES = 1    # for a backend without max_retries


@dataclass(frozen=True)
class AnchorRequest:
    """One dimension whose anchors the model writes: what it is, the levels it may anchor, the samples to write from."""

    name: str
    description: str
    binary: bool
    levels: tuple[float, ...]
    current: dict[Any, Any]                   # its anchors now, as YAML data (level -> text or {text, ...})
    top: tuple[tuple[str, str], ...]          # (prompt, completion) at the ceiling
    low: tuple[tuple[str, str, float], ...]   # (prompt, completion, score), lowest first
    part_of: str | None = None                # the dimension it is a part of, when split


def levels_of(binary: bool, low: float, high: float, anchored: Sequence[float]) -> tuple[float, ...]:
    """The levels an answer may anchor: 0 and 1; every whole level of a scale with whole bounds up to 10 levels
    apart; else the levels anchored now and the range's ends."""
    if binary:
        return (0.0, 1.0)
    if float(low).is_integer() and float(high).is_integer() and high - low <= 10:
        return tuple(float(v) for v in range(int(low), int(high) + 1))
    return tuple(sorted({float(low), float(high), *(float(v) for v in anchored)}))


def _level(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def anchor_schema(levels: Sequence[float]) -> dict[str, Any]:
    """The JSON schema of an answer for a dimension with ``levels``."""
    examples = {"type": "array", "maxItems": MAX_EXAMPLES,
                "items": {"type": "string", "minLength": 1, "maxLength": MAX_EXAMPLE_CHARS}}
    whole = all(float(v).is_integer() for v in levels)
    return {"type": "object", "additionalProperties": False, "required": ["anchors"], "properties": {
        "anchors": {"type": "array", "minItems": 2, "maxItems": len(levels), "items": {
            "type": "object", "additionalProperties": False, "required": ["level", "text"], "properties": {
                "level": {"type": "integer" if whole else "number", "enum": [_level(v) for v in levels]},
                "text": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT},
                "positive": examples, "negative": examples}}}}}


def _json_object(text: str) -> Any:
    """The answer's JSON object, allowing a ```json fence or words around it."""
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, flags=re.DOTALL)
    body = fenced.group(1) if fenced else text
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in the answer")
    try:
        return json.loads(body[start:end + 1])
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc.msg} at character {exc.pos})") from None


def _examples(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_EXAMPLES or not all(
            isinstance(v, str) and v.strip() and len(v) <= MAX_EXAMPLE_CHARS for v in value):
        raise ValueError(f"{where}: expected a list of at most {MAX_EXAMPLES} non-empty texts of at most "
                         f"{MAX_EXAMPLE_CHARS} characters")
    return [v.strip() for v in value]


def parse_anchors(text: str | None, levels: Sequence[float]) -> dict[int | float, dict[str, Any]]:
    """``{level: {text, positive?, negative?}}`` from an answer, checked as :func:`anchor_schema` says; ValueError
    names what is wrong."""
    if not text or not text.strip():
        raise ValueError("empty answer")
    data = _json_object(text)
    if not isinstance(data, dict) or set(data) != {"anchors"}:
        raise ValueError('expected {"anchors": [...]} and nothing else')
    items = data["anchors"]
    if not isinstance(items, list) or not 2 <= len(items) <= len(levels):
        raise ValueError(f"anchors: expected a list of 2 to {len(levels)} anchors")
    out: dict[int | float, dict[str, Any]] = {}
    shown = ", ".join(f"{_level(v)}" for v in levels)
    for i, item in enumerate(items):
        where = f"anchors[{i}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where}: expected an object")
        extra = sorted(set(item) - {"level", "text", "positive", "negative"})
        if extra:
            raise ValueError(f"{where}: unexpected key {extra[0]!r}")
        level = item.get("level")
        if isinstance(level, bool) or not isinstance(level, int | float) or not math.isfinite(level) or \
                not any(math.isclose(float(level), v) for v in levels):
            raise ValueError(f"{where}.level: {level!r} is not one of the levels {shown}")
        key = _level(next(v for v in levels if math.isclose(float(level), v)))
        if key in out:
            raise ValueError(f"{where}.level: level {key} anchored twice")
        words = item.get("text")
        if not isinstance(words, str) or not words.strip() or len(words) > MAX_TEXT:
            raise ValueError(f"{where}.text: expected a non-empty text of at most {MAX_TEXT} characters")
        anchor: dict[str, Any] = {"text": words.strip()}
        for kind in ("positive", "negative"):
            listed = _examples(item.get(kind), f"{where}.{kind}")
            if listed:
                anchor[kind] = listed
        out[key] = anchor
    if _level(levels[-1]) not in out:
        raise ValueError(f"no anchor for the top level {_level(levels[-1])}")
    return dict(sorted(out.items()))


def _shown(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + " [...]"


def chat(request: AnchorRequest, rubric_name: str, rubric_description: str) -> list[dict[str, str]]:
    """The request for one dimension's anchors."""
    current = [(_level(float(lv)), a if isinstance(a, str) else (a or {}).get("text", ""))
               for lv, a in sorted(request.current.items(), key=lambda kv: float(kv[0]))]
    text = render_file(TEMPLATE, "rubric tighten", rubric=rubric_name, rubric_description=rubric_description,
                       dimension=request.name, part_of=request.part_of, description=request.description,
                       binary=request.binary, levels=[_level(v) for v in request.levels], current=current,
                       top=[(_shown(p), _shown(c)) for p, c in request.top[:MAX_SAMPLES]],
                       low=[(_shown(p), _shown(c), f"{s:g}") for p, c, s in request.low[:MAX_SAMPLES]],
                       max_text=MAX_TEXT, max_examples=MAX_EXAMPLES)
    return [{"role": "user", "content": text}]


class ModelAnchors:
    """Asks a backend (the host's :class:`rlkit.judging.asking.JudgeBackend`'s served backend) for anchors,
    re-asking each malformed answer up to ``retries`` times."""

    def __init__(self, backend: Any, retries: int, rubric_name: str, rubric_description: str = "") -> None:
        self.backend = backend
        self.retries = retries
        self.rubric_name, self.rubric_description = rubric_name, rubric_description
        self.attempts = 0

    @property
    def label(self) -> str:
        """Who wrote the anchors, for the changelog: the backend's model (or name) and the template's hash."""
        identity = self.backend.identity()
        who = identity.get("model") or identity.get("backend") or "the model backend"
        return f"{who} (template {template_hash(TEMPLATE)[:12]})"

    def _complete(self, chats: list[list[dict[str, str]]], schemas: list[dict[str, Any]]) -> list[Any]:
        """One batch per distinct schema, where the backend constrains answers; else one batch."""
        if not getattr(self.backend, "structured_outputs", False):
            return list(self.backend.complete(chats))
        answers: list[Any] = [None] * len(chats)
        groups: dict[str, list[int]] = {}
        for i, schema in enumerate(schemas):
            groups.setdefault(json.dumps(schema, sort_keys=True), []).append(i)
        for indices in groups.values():
            got = self.backend.complete([chats[i] for i in indices], schema=schemas[indices[0]])
            for i, answer in zip(indices, got, strict=True):
                answers[i] = answer
        return answers

    def __call__(self, requests: Sequence[AnchorRequest]) -> list[dict[int | float, dict[str, Any]]]:
        """Each request's anchors; DataError when one is still malformed after the retries."""
        def complete(chats: list[list[dict[str, str]]], indices: list[int]) -> list[Any]:
            self.attempts += 1
            return self._complete(chats, [anchor_schema(requests[i].levels) for i in indices])

        def reminder(i: int) -> str:
            levels = ", ".join(f"{_level(v)}" for v in requests[i].levels)
            return ('Answer again with one JSON object {"anchors": [{"level": ..., "text": ...}, ...]} anchoring the '
                    f"top level and at least one below it, levels from {levels}.")

        results = ask_until_parsed(complete, [chat(r, self.rubric_name, self.rubric_description) for r in requests],
                                   lambda i, text: parse_anchors(text, requests[i].levels), reminder, self.retries)
        failed = [i for i, result in enumerate(results) if isinstance(result, str)]
        if failed:
            i = failed[0]
            raise DataError(f"the model's anchors for dimension {requests[i].name} cannot be used after "
                            f"{self.retries + 1} attempt{'s' if self.retries else ''}: {results[i]}; nothing written",
                            "tighten.backend")
        return results

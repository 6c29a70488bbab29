"""``rlkit rubric tighten``'s split: a saturated dimension whose top samples still differ in a way a rule can see,
and that measures two things at once, proposed as two dimensions (the rule path: no model is asked).

Two conditions, both needed:

* **The top samples differ** (:func:`top_differences`): at least two distinct completions at the dimension's ceiling,
  and something a rule measures sets some of them apart from the others: a measure of one of the dimension's own
  checks (a ``length`` check's size in its unit, how many of a ``keywords`` check's words occur, a ``regex`` check's
  number of matches, a ``sentences`` check's count), their size in words (the longest at least twice the shortest),
  their lines (some one line, some several) or one of the shapes of
  :data:`rlkit.evaluation.rubric_tightening.SHAPES`. Top samples alike in everything measured give a split nothing
  to tell apart.
* **The dimension measures two things** (the first rule that applies):

  1. *Two properties in its checks* (:data:`PROPERTIES`): its checks measure at least two properties (size:
     ``length``, ``sentences``, ``overlong``; wording: ``regex``, ``keywords``; the answer: ``match``; format:
     ``json``; ``repetition``; ``episode``). The first property's checks become the first part, the rest the second.
     A check the tighten rules added (the shared pattern's ``absent`` regex) goes to the part that holds wording
     checks, else to the first.
  2. *Two qualities joined by "and"*: its top anchor's text (else its description) joins exactly two qualities with
     one "and" ("Short and names the sum"), each named in a few words (at most :data:`MAX_QUALITY_WORDS`, and no
     parenthesis, colon, semicolon, quote or sentence end inside: a longer text's "and" joins words within one
     quality, as "case, punctuation and articles ignored" does). Each quality is a part; an anchor whose text also
     joins two with one "and" gives each part its half, any other anchor is copied to both. A dimension with checks
     splits only where each check's words (its pattern or keywords, or what its type measures: :data:`TYPE_WORDS`)
     share more with one quality than with the other and each quality gets at least one check.

Each part keeps the dimension's type, range, judge and scope, gets its own anchors and, where the dimension had rule
checks, its own. The weight is split so the rubric's total is unchanged: by the parts' check weights (the rule judge
then gives a scale dimension's parts, weighted, exactly the reward the dimension gave), else half each. Left whole,
with why: a per-prompt criterion, a dimension with a gate, a condition or a priority, one another dimension's
condition names, and one the run's saved config names (its weights, stages or aggregator would name a dimension that
is gone).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlkit.core.rubric import Dimension, Rubric

PROPERTIES: dict[str, str] = {"length": "size", "sentences": "size", "overlong": "size", "regex": "wording",
                              "keywords": "wording", "match": "answer", "json": "format", "repetition": "repetition",
                              "episode": "episode"}
# what a check of each type measures, in the words an anchor would use for it (rule 2's check-to-quality match)
TYPE_WORDS: dict[str, set[str]] = {
    "length": {"short", "brief", "concise", "long", "length", "lengthy", "words", "characters", "succinct"},
    "sentences": {"sentence", "sentences", "short", "brief", "concise"},
    "overlong": {"short", "brief", "concise", "long", "length"},
    "match": {"correct", "right", "answer", "sum", "result", "reference", "equals", "accurate"},
    "json": {"json", "format", "formatted", "keys", "structured"},
    "repetition": {"repeat", "repeats", "repetition", "repetitive", "varied"},
}
_STOP = {"the", "a", "an", "is", "are", "it", "its", "of", "to", "in", "on", "with", "answer", "response", "that",
         "this", "be", "uses", "has", "gives"}
_WORD = re.compile(r"[^\W\d_]+")
_AND = re.compile(r"\s+and\s+", re.IGNORECASE)
MAX_QUALITY_WORDS = 8  # a quality is named in a few words ("Brief", "says which number is the sum")
_SENTENCE_END = re.compile(r"[.!?]+(?:\s+|$)")


@dataclass(frozen=True)
class Split:
    """Two dimensions in place of one: their YAML data, the rule that split it, and what sets the top apart."""

    parts: list[dict[str, Any]]
    rule: str
    differs: list[str]

    def describe(self, name: str, weight: float) -> str:
        names = " and ".join(f"{p['name']} (weight {p['weight']:g}{_checks_note(p)})" for p in self.parts)
        return (f"split into {names}: {self.rule}; total weight {weight:g} kept; its top samples differ in "
                f"{'; '.join(self.differs)}")


def _checks_note(part: dict[str, Any]) -> str:
    checks = part.get("checks") or []
    return f", {len(checks)} check{'s' if len(checks) != 1 else ''}" if checks else ""


def _words(text: str) -> set[str]:
    return {w.casefold() for w in _WORD.findall(text)}


def _vary(values: Sequence[int]) -> tuple[int, int] | None:
    return (min(values), max(values)) if len(set(values)) > 1 else None


def top_differences(top: Sequence[str], checks: Sequence[dict[str, Any]] | None) -> list[str]:
    """What a rule sees that sets some of ``top`` apart from the others (see the module docstring); empty when
    nothing does or fewer than two of them are distinct."""
    from rlkit.evaluation.rubric_tightening import SHAPES

    top = list(dict.fromkeys(top))
    if len(top) < 2:
        return []
    out = []
    for i, check in enumerate(checks or [], start=1):
        kind = check.get("type")
        spread = None
        if kind == "length" and check.get("unit", "chars") in ("chars", "words"):
            unit = check.get("unit", "chars")
            spread = _vary([len(t) if unit == "chars" else len(t.split()) for t in top])
            what = unit
        elif kind == "keywords":
            listed = [w for key in ("any", "all") if isinstance(check.get(key), list) for w in check[key]]
            fold = not check.get("case_sensitive")
            spread = _vary([sum((w.casefold() if fold else w) in (t.casefold() if fold else t) for w in listed)
                            for t in top]) if listed else None
            what = "of its words"
        elif kind == "regex" and not check.get("absent"):
            pattern = re.compile(check["pattern"], 0 if check.get("case_sensitive") else re.IGNORECASE)
            spread = _vary([len(pattern.findall(t)) for t in top])
            what = "matches"
        elif kind == "sentences":
            spread = _vary([sum(bool(_WORD.search(p)) for p in _SENTENCE_END.split(t)) for t in top])
            what = "sentences"
        if spread is not None:
            out.append(f"check {i} ({kind}): {spread[0]} to {spread[1]} {what}")
    sizes = [len(t.split()) for t in top]
    if max(sizes) >= 2 * max(min(sizes), 1) and max(sizes) - min(sizes) >= 2:
        out.append(f"size: {min(sizes)} to {max(sizes)} words")
    lines = [t.strip().count("\n") + 1 for t in top]
    if _vary(lines) and min(lines) == 1:
        out.append(f"lines: some one line, some up to {max(lines)}")
    for shape, pattern in SHAPES.items():
        having = sum(bool(re.search(pattern, t)) for t in top)
        if 0 < having < len(top):
            out.append(f"shape: {having} of {len(top)} are {shape}")
            break
    return out


def _qualities(text: str) -> tuple[str, str] | None:
    """The two qualities ``text`` joins with exactly one "and"; None otherwise, and for a text that is more than a
    name for two qualities: over :data:`MAX_QUALITY_WORDS` words a side, or a clause of its own (parentheses, a
    colon, a semicolon, a quote or a sentence end inside), where an "and" joins words within one quality."""
    body = text.strip().rstrip(".!")
    pieces = _AND.split(body)
    if len(pieces) != 2 or re.search(r"[()\[\]:;\"“”.!?]", body):
        return None
    if not all(1 <= len(_WORD.findall(p)) <= MAX_QUALITY_WORDS for p in pieces):
        return None
    return pieces[0].strip(" ,"), pieces[1].strip(" ,")


def _anchor_text(anchor: Any) -> str:
    return anchor if isinstance(anchor, str) else str((anchor or {}).get("text", ""))


def _with_text(anchor: Any, text: str) -> Any:
    if isinstance(anchor, str) or anchor is None:
        return text
    return {**copy.deepcopy(anchor), "text": text}


def _check_words(check: dict[str, Any]) -> set[str]:
    words = set(TYPE_WORDS.get(str(check.get("type")), ()))
    if isinstance(check.get("pattern"), str):
        words |= _words(re.sub(r"\\[a-zA-Z]", " ", check["pattern"]))
    for key in ("any", "all", "none"):
        if isinstance(check.get(key), list):
            words |= {w for item in check[key] for w in _words(str(item))}
    return words


def _slug(text: str, fallback: str) -> str:
    words = [w for w in (w.casefold() for w in _WORD.findall(text)) if w not in _STOP and len(w) > 2]
    return words[0] if words else fallback


def _unique(name: str, taken: set[str]) -> str:
    out, n = name, 2
    while out in taken:
        out, n = f"{name}_{n}", n + 1
    taken.add(out)
    return out


def _weights(total: float, shares: Sequence[float]) -> tuple[float, float]:
    # the two parts' weights, summing to the dimension's exactly (the second takes the rounding)
    first = round(total * shares[0] / (shares[0] + shares[1]), 6) if sum(shares) > 0 else round(total / 2, 6)
    return first, total - first


def _names_in(tree: Any, name: str, path: str = "") -> str | None:
    """The first key path of ``tree`` (a saved config) whose key or string value is ``name``."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            here = f"{path}.{key}" if path else str(key)
            if key == name:
                return here
            found = _names_in(value, name, here)
            if found:
                return found
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            found = _names_in(value, name, f"{path}[{i}]")
            if found:
                return found
    elif tree == name:
        return path
    return None


def why_whole(dim: Dimension, rubric: Rubric, run_config: dict[str, Any] | None) -> str | None:
    """Why ``dim`` cannot be split whatever its samples say (see the module docstring), None when it can."""
    if dim.category is not None:
        return "a per-prompt criterion is one yes/no check"
    for field, value in (("gate", dim.gate), ("condition", dim.condition), ("priority", dim.priority)):
        if value is not None:
            return f"it has a {field}, which two parts could not both keep"
    named_by = [d.name for d in rubric.dimensions if d.condition is not None and d.condition.dimension == dim.name]
    if named_by:
        return f"{', '.join(named_by)}'s condition names it"
    config = {k: v for k, v in (run_config or {}).items() if k != "rubric"}
    where = _names_in(config, dim.name) or _names_in((run_config or {}).get("rubric") or {}, dim.name, "rubric")
    if where:
        return f"the run's config names it at {where}, which would name a dimension that is gone"
    return None


def _part(dim_data: dict[str, Any], name: str, weight: float, description: str, anchors: dict[Any, Any],
          checks: list[dict[str, Any]] | None) -> dict[str, Any]:
    part = {k: copy.deepcopy(v) for k, v in dim_data.items() if k not in ("name", "description", "weight", "anchors",
                                                                           "checks")}
    part = {"name": name, "description": description, **part, "weight": weight, "anchors": anchors}
    if checks:
        part["checks"] = checks
    return part


def _by_property(dim: Dimension, dim_data: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                                     list[str]] | None:
    """Rule 1: the tightened checks in two parts by the property of the dimension's own checks, and the parts'
    property names; None when they measure one property."""
    own = dim.checks or []
    props = [PROPERTIES.get(str(c.get("type")), str(c.get("type"))) for c in own]
    if len(set(props)) < 2:
        return None
    first = props[0]
    checks = dim_data.get("checks") or []
    parts: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
    for i, check in enumerate(checks):
        if i < len(own):
            parts[props[i] != first].append(copy.deepcopy(check))
        else:  # added by the tighten rules (the shared pattern's absent regex): with the wording checks
            second_has_wording = "wording" in props and first != "wording"
            parts[second_has_wording].append(copy.deepcopy(check))
    rest = list(dict.fromkeys(p for p in props if p != first))
    return parts[0], parts[1], [first, " and ".join(rest)]


def _by_and(dim: Dimension, dim_data: dict[str, Any]) -> tuple[tuple[str, str], list[list[dict[str, Any]]]] | str:
    """Rule 2: the two qualities and the checks of each; a reason when it does not apply."""
    anchors = dim_data.get("anchors") or {}
    top = max(anchors, key=float, default=None)
    source = _qualities(_anchor_text(anchors[top])) if top is not None else None
    if source is None:
        source = _qualities(dim.description)
    if source is None:
        return 'neither its top anchor nor its description joins two qualities with one "and"'
    checks = dim_data.get("checks") or []
    halves: list[list[dict[str, Any]]] = [[], []]
    if checks:
        words = [_words(q) for q in source]
        for check in checks:
            overlap = [len(_check_words(check) & w) for w in words]
            if overlap[0] == overlap[1]:
                return (f"its check {check.get('type')} matches neither of {source[0]!r} and {source[1]!r} more than "
                        "the other")
            halves[overlap[1] > overlap[0]].append(copy.deepcopy(check))
        if not all(halves):
            return f"its checks all belong to one of {source[0]!r} and {source[1]!r}"
    return source, halves


def propose_split(dim: Dimension, dim_data: dict[str, Any], rubric: Rubric, top: Sequence[str],
                  run_config: dict[str, Any] | None, taken: set[str]) -> Split | str:
    """Two dimensions in place of ``dim`` (its tightened YAML data ``dim_data``), or why not (one line). ``taken``:
    the rubric's dimension names, to which the parts' names are added."""
    why = why_whole(dim, rubric, run_config)
    if why:
        return why
    differs = top_differences(top, dim.checks)
    if not differs:
        return ("its top samples do not differ in anything a rule measures (size, lines, shape, its checks' counts)"
                if len(set(top)) > 1 else "fewer than two distinct top samples to tell apart")
    anchors = dim_data.get("anchors") or {}
    weight = float(dim_data.get("weight", 1.0))
    by_property = _by_property(dim, dim_data)
    if by_property is not None:
        first, second, props = by_property
        shares = [sum(float(c.get("weight", 1.0)) for c in part) for part in (first, second)]
        weights = _weights(weight, shares)
        parts = []
        for checks, prop, w in zip((first, second), props, weights, strict=True):
            label = f"Its {prop}"
            name = _unique(f"{dim.name}_{prop.split(' and ')[0]}", taken)
            description = f"{dim.description.rstrip('.')}: scored on {prop.lower()} only.".lstrip(": ")
            part_anchors = {lv: _with_text(a, f"{label}: {_anchor_text(a)}") for lv, a in anchors.items()}
            parts.append(_part(dim_data, name, w, description, part_anchors, checks))
        return Split(parts, f"its checks measure two properties ({props[0]}; {props[1]})", differs)
    by_and = _by_and(dim, dim_data)
    if isinstance(by_and, str):
        return f"its checks measure one property and {by_and}" if dim.checks else by_and
    qualities, halves = by_and
    shares = [sum(float(c.get("weight", 1.0)) for c in half) for half in halves] if halves[0] else [1.0, 1.0]
    weights = _weights(weight, shares)
    parts = []
    for i, (quality, checks, w) in enumerate(zip(qualities, halves, weights, strict=True)):
        name = _unique(f"{dim.name}_{_slug(quality, 'ab'[i])}", taken)
        part_anchors = {}
        for level, anchor in anchors.items():
            pair = _qualities(_anchor_text(anchor))
            part_anchors[level] = _with_text(anchor, pair[i]) if pair else copy.deepcopy(anchor)
        description = f"{quality[0].upper()}{quality[1:]} (one of the two qualities {dim.name} joined)."
        parts.append(_part(dim_data, name, w, description, part_anchors, checks or None))
    return Split(parts, f'it joins two qualities with "and" ({qualities[0]!r}; {qualities[1]!r})', differs)

"""Parsing a ranking of labelled answers that an LLM judge writes.

Like :mod:`rlkit.judging.parsing`, a pure function of the text that never raises on what a model writes.

Rankings (:func:`parse_ranking`), tried in this order:

1. JSON: a list of labels best first (an inner list is a tier of ties), or an object with a
   ``ranking``/``order`` key holding such a list or a chain string. Same candidates as for scores, but
   only blocks that contain a double quote, so ``[A] > [B]`` is not mistaken for JSON.
2. The last ``[[...]]`` whose contents name a label, read by steps 3-4 (``[[A]]`` alone means A first).
3. Chains of labels joined by ``>``, ``>>``/``≫`` (strength 2.0), ``=``/``≈``/``~`` (a tie, strength
   0.0), or written worst first with ``<``, ``<<``/``≪`` (read reversed: ``B < C < A`` is ``A > C > B``).
   Labels are matched case-insensitively and may be written ``Response A``, ``(A)``, ``[A]`` or
   ``**A**``. If some chain names every label, the last such chain is the answer (method ``"chain"``).
   Else if one chain names a label, it is the answer. Else the chains are pairwise statements (method
   ``"pairwise"``): every stated "x above y" (each pair of tiers within a statement) is collected once,
   each label gets a Copeland score (wins minus losses over those pairs), and labels are ordered by
   score, ties broken by the order of ``labels``, one label per tier, strength 1.0 per gap.
   ``cycles_broken`` counts the stated pairs that this order contradicts (so ``A > B, B > C, C > A``
   gives ``A > B > C`` and ``cycles_broken=1``). Commas, newlines and prose separate statements here.
4. Only when no chain exists: a comma-separated list of labels and nothing else (``A, C, B``) is an order
   best first (method ``"comma"``); the list naming the most labels wins, the last one on a tie. The list must
   stand alone on its line, after at most a heading that ends with a colon (``Ranking: A, C, B``), so prose such
   as "A is better than C, C is better than B" is not read as the order ``C, C``.
5. Only when nothing above matched: a score per label, ``A: 8/10, B: 6/10`` or ``Response A: 2`` (a
   colon, a number, an optional ``/ max``), as judges asked to rank often answer; labels are ordered by
   score, higher first, equal scores tied, strength 1.0 per gap (method ``"scores"``). At least two
   labels must be scored; a label scored twice keeps its last score.

Direction. A list (comma or JSON) has no direction of its own and is read best first, unless what introduces
it, its line up to the list and the line before when that one ends with a colon (a heading), says worst first
("worst first", "from worst to best", "ascending", "lowest to highest", a JSON key ``worst_to_best``): then it
is read reversed and must name every label. A worst-first phrase elsewhere in the answer, a heading saying both
directions, or a chain whose comparators contradict its heading (``Worst first: B > C > A``) make the answer
ambiguous; so do a chain mixing ``>`` and ``<`` between labels (``A > B < C``, when it is the chain the answer
would be read from), a ``[[A]]`` verdict introduced by "worst", and per-label numbers that are exactly the ranks
1..n (ranks or scores? ``A: 1, B: 2, C: 3`` reads either way). An ambiguous answer is refused: it comes back
with ``method="none"``, a parse failure, and never as a guessed order.

Labels not mentioned are appended as one last tier (in ``labels`` order, strength 1.0) and make
``complete`` false; so does a label written twice (its first place is kept). With nothing readable the
order is a single tier of every label (all tied) and ``method="none"``. Tokens that are not labels
(``E`` when the labels are A-D) are dropped, gaps around them merged (strongest wins), and listed in
``unknown``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rlkit.judging.parsing import json_candidates, normalised_key

__all__ = ["RankingParse", "parse_ranking", "ranks_from_order"]


@dataclass(frozen=True)
class RankingParse:
    """A ranking read from one judge answer: ``order`` is tiers best first (labels in a tier are judged
    equal), ``strengths`` has one entry per gap between consecutive tiers."""

    order: list[list[str]]
    strengths: list[float]
    method: str
    complete: bool
    cycles_broken: int = 0
    unknown: list[str] = field(default_factory=list)


# --- rankings -----------------------------------------------------------------------------------

_PREFIX = r"(?:response|answer|assistant|output|candidate|model|option|completion|summary)"
# The look-behind lets a token start only at the start of a word run, which keeps matching linear on
# text such as "a-a-a-...".
_TOKEN = rf"(?<![\w.\-])[\*\"'`]{{0,3}}(?:{_PREFIX}[ \t_\-]{{1,3}})?[\(\[]?\w+(?:[.\-]\w+)*[\)\]]?[\*\"'`]{{0,3}}"
_COMPARATOR = r">>|\u226b|>|<<|\u226a|<|==|=|\u2248|~"
_STRENGTH = {">>": 2.0, "\u226b": 2.0, ">": 1.0, "<<": 2.0, "\u226a": 2.0, "<": 1.0,
             "==": 0.0, "=": 0.0, "\u2248": 0.0, "~": 0.0}
# +1: the left label is the better one; -1: the worse one (a chain written worst first); a tie has none
_DIRECTION = {">>": 1, "\u226b": 1, ">": 1, "<<": -1, "\u226a": -1, "<": -1}
_CHAIN_RE = re.compile(rf"{_TOKEN}(?:\s*(?:{_COMPARATOR})\s*{_TOKEN})+", re.I)
_SPLIT_RE = re.compile(rf"\s*({_COMPARATOR})\s*")
_COMMA_RE = re.compile(rf"{_TOKEN}(?:\s*,\s*{_TOKEN})+", re.I)
_BRACKETS_RE = re.compile(r"\[\[([^\[\]\n]{1,300})\]\]")
_PREFIX_RE = re.compile(rf"^{_PREFIX}[ \t_\-]+", re.I)
_RANKING_KEYS = {"ranking", "rankings", "order", "rank", "ranked", "finalranking", "result"}
_GAP = r"[\s_\-]{0,3}"
# Phrases that say which end of an order comes first. Word edges are letters only, so a JSON key such as
# "ranking_worst_to_best" counts.
_WORST_FIRST_RE = re.compile(
    rf"(?<![a-z])(?:(?:worst|weakest|lowest|least|bottom){_GAP}(?:first|to{_GAP}(?:best|strongest|highest|most|top))"
    rf"|from{_GAP}(?:the{_GAP})?(?:worst|weakest|lowest)|ascending|increasing{_GAP}order)(?![a-z])", re.I)
_BEST_FIRST_RE = re.compile(
    rf"(?<![a-z])(?:(?:best|strongest|highest|most|top){_GAP}(?:first|to{_GAP}(?:worst|weakest|lowest|least|bottom))"
    rf"|from{_GAP}(?:the{_GAP})?(?:best|strongest|highest)|descending|decreasing{_GAP}order)(?![a-z])", re.I)
_WORST_RE = re.compile(r"(?<![a-z])(?:worst|weakest|least|lowest|bottom)(?![a-z])", re.I)


class _Ambiguous(Exception):
    """An answer that reads more than one way: refused (method "none"), never guessed."""


def _introduction(text: str, start: int) -> str:
    """What introduces the order that starts at ``start``: its line up to there, and the line before it when that
    one is a heading (ends with a colon)."""
    line_start = text.rfind("\n", 0, start) + 1
    intro = text[line_start:start]
    end = line_start - 1
    while end > 0:
        begin = text.rfind("\n", 0, end) + 1
        line = text[begin:end]
        if line.strip():
            if line.strip().rstrip("*_` ").endswith(":"):
                intro = line + "\n" + intro
            break
        end = begin - 1
    return intro


def _list_direction(intro: str, whole: str) -> int:
    """+1 when a list introduced by ``intro`` is best first, -1 worst first; raises :class:`_Ambiguous` when its
    introduction says both, or says nothing while the answer says worst first elsewhere."""
    worst, best = _WORST_FIRST_RE.search(intro), _BEST_FIRST_RE.search(intro)
    if worst and best:
        raise _Ambiguous
    if worst:
        return -1
    if best:
        return 1
    if _WORST_FIRST_RE.search(whole):
        raise _Ambiguous  # said somewhere, about this list or not: no way to tell
    return 1


def _oriented(raw_tiers: list[list[str]], strengths: list[float], direction: int, labels: _Labels,
              ) -> _Statement:
    """A list read in ``direction``; worst first it is reversed and must name every label (where the unnamed
    would go is not said)."""
    if direction < 0:
        raw_tiers, strengths = raw_tiers[::-1], strengths[::-1]
    statement = _statement(raw_tiers, strengths, labels)
    if direction < 0 and statement.known != set(labels.labels):
        raise _Ambiguous
    return statement


class _Labels:
    def __init__(self, labels: list[str]) -> None:
        self.labels = list(labels)
        self.index = {label: i for i, label in enumerate(self.labels)}
        lowered: dict[str, list[str]] = {}
        for label in self.labels:
            lowered.setdefault(label.lower(), []).append(label)
        self.lowered = {k: v[0] for k, v in lowered.items() if len(v) == 1}

    def resolve(self, token: str) -> tuple[str | None, str]:
        """The label a token names (or None) and the token stripped of decoration, for ``unknown``."""
        decor = " \t\n*\"'`()[]"
        first = token.strip(decor)
        second = _PREFIX_RE.sub("", first).strip(decor)
        for candidate in (first, second):
            if candidate in self.index:
                return candidate, candidate
            if candidate.lower() in self.lowered:
                return self.lowered[candidate.lower()], candidate
        return None, second


@dataclass
class _Statement:
    tiers: list[list[str]]
    strengths: list[float]
    unknown: list[str]
    duplicated: bool
    ambiguous: bool = False  # comparators pointing both ways, or against the chain's heading

    @property
    def known(self) -> set[str]:
        return {label for tier in self.tiers for label in tier}


def _statement(raw_tiers: list[list[str]], strengths: list[float], labels: _Labels) -> _Statement:
    """Resolve tokens to labels, dropping unknown and repeated ones and merging the gaps around them."""
    tiers: list[list[str]] = []
    kept_strengths: list[float] = []
    unknown: list[str] = []
    seen: set[str] = set()
    duplicated = False
    pending = 0.0
    for i, raw_tier in enumerate(raw_tiers):
        if i > 0:
            pending = max(pending, strengths[i - 1])
        tier: list[str] = []
        for token in raw_tier:
            label, cleaned = labels.resolve(token)
            if label is None:
                if cleaned and cleaned not in unknown:
                    unknown.append(cleaned)
            elif label in seen:
                duplicated = True
            else:
                seen.add(label)
                tier.append(label)
        if tier:
            if tiers:
                kept_strengths.append(pending)
            tiers.append(tier)
            pending = 0.0
    return _Statement(tiers, kept_strengths, unknown, duplicated)


def _chain(text: str, labels: _Labels, intro: str = "") -> _Statement:
    parts = _SPLIT_RE.split(text.strip())
    tokens, seps = parts[0::2], parts[1::2]
    # The direction is read only between labels, so markup such as "<think>" after a label states nothing.
    stated: set[int] = set()
    between: set[int] = set()
    seen = labels.resolve(tokens[0])[0] is not None
    for sep, token in zip(seps, tokens[1:], strict=True):
        if _DIRECTION.get(sep):
            between.add(_DIRECTION[sep])
        if labels.resolve(token)[0] is not None:
            if seen:
                stated |= between if len(between) < 2 else {1, -1}
            seen, between = True, set()
    direction = next(iter(stated)) if len(stated) == 1 else 0
    worst, best = _WORST_FIRST_RE.search(intro), _BEST_FIRST_RE.search(intro)
    ambiguous = len(stated) > 1 or (direction > 0 and bool(worst) and not best) or \
        (direction < 0 and bool(best) and not worst)
    raw_tiers: list[list[str]] = [[tokens[0]]]
    strengths: list[float] = []
    for sep, token in zip(seps, tokens[1:], strict=True):
        strength = _STRENGTH[sep]
        if strength == 0.0:
            raw_tiers[-1].append(token)
        else:
            raw_tiers.append([token])
            strengths.append(strength)
    if direction < 0:
        raw_tiers, strengths = raw_tiers[::-1], strengths[::-1]
    statement = _statement(raw_tiers, strengths, labels)
    statement.ambiguous = ambiguous
    return statement


def _merge_unknown(statements: list[_Statement]) -> list[str]:
    out: list[str] = []
    for s in statements:
        out.extend(u for u in s.unknown if u not in out)
    return out


def _finish(statement: _Statement, labels: _Labels, method: str, cycles_broken: int = 0,
            unknown: list[str] | None = None, duplicated: bool | None = None) -> RankingParse:
    order = [list(t) for t in statement.tiers]
    strengths = list(statement.strengths)
    mentioned = statement.known
    rest = [label for label in labels.labels if label not in mentioned]
    if rest:
        if order:
            strengths.append(1.0)
        order.append(rest)
    dup = statement.duplicated if duplicated is None else duplicated
    return RankingParse(
        order=order,
        strengths=strengths,
        method=method,
        complete=not rest and not dup and bool(mentioned),
        cycles_broken=cycles_broken,
        unknown=statement.unknown if unknown is None else unknown,
    )


def _copeland(statements: list[_Statement], labels: _Labels) -> RankingParse:
    pairs: set[tuple[str, str]] = set()
    mentioned: set[str] = set()
    for s in statements:
        mentioned |= s.known
        for i, upper in enumerate(s.tiers):
            for lower in s.tiers[i + 1 :]:
                pairs.update((x, y) for x in upper for y in lower if x != y)
    score = dict.fromkeys(mentioned, 0)
    for winner, loser in pairs:
        score[winner] += 1
        score[loser] -= 1
    ranked = sorted(mentioned, key=lambda label: (-score[label], labels.index[label]))
    position = {label: i for i, label in enumerate(ranked)}
    contradicted = sum(1 for winner, loser in pairs if position[winner] > position[loser])
    merged = _Statement([[label] for label in ranked], [1.0] * (len(ranked) - 1), [], False)
    return _finish(merged, labels, "pairwise", cycles_broken=contradicted, unknown=_merge_unknown(statements),
                   duplicated=False)


def _from_chains(text: str, labels: _Labels, intro: str = "") -> RankingParse | None:
    """``intro``: what introduces ``text`` when it is part of a larger answer (a ``[[...]]`` verdict, a JSON key)."""
    statements = [s for s in (_chain(m.group(0), labels, intro + _introduction(text, m.start()))
                              for m in _CHAIN_RE.finditer(text)) if s.known]
    if not statements:
        return None
    everyone = set(labels.labels)
    full = [s for s in statements if s.known == everyone]
    if full:
        if full[-1].ambiguous:
            raise _Ambiguous
        return _finish(full[-1], labels, "chain")
    if any(s.ambiguous for s in statements):
        raise _Ambiguous
    if len(statements) == 1:
        return _finish(statements[0], labels, "chain")
    return _copeland(statements, labels)


def _stands_alone(text: str, m: re.Match[str]) -> bool:
    """Whether a list is all its line holds, after at most a heading ending with a colon (and list markup)."""
    line_start = text.rfind("\n", 0, m.start()) + 1
    line_end = text.find("\n", m.end())
    before = text[line_start:m.start()].strip(" \t*_`#>-")
    after = text[m.end():len(text) if line_end == -1 else line_end].strip(" \t*_`.!")
    return not after and (not before or before.endswith(":"))


def _from_commas(text: str, labels: _Labels, intro: str = "", whole: str | None = None) -> RankingParse | None:
    """``intro`` and ``whole``: what introduces ``text`` and the whole answer, when ``text`` is part of one."""
    best: _Statement | None = None
    for m in _COMMA_RE.finditer(text):
        tokens = m.group(0).split(",")
        # Every item must be a label: a prose list such as "A, B, and C" or "tone, length" is not an order.
        if any(labels.resolve(t)[0] is None for t in tokens) or not _stands_alone(text, m):
            continue
        direction = _list_direction(intro + _introduction(text, m.start()), text if whole is None else whole)
        s = _oriented([[t] for t in tokens], [1.0] * (len(tokens) - 1), direction, labels)
        if best is None or len(s.known) >= len(best.known):
            best = s
    return _finish(best, labels, "comma") if best is not None else None


_LABEL_SCORE_RE = re.compile(rf"({_TOKEN})\s*:\s*(-?\d+(?:\.\d+)?)(?:\s*(?:/|out of)\s*\d+(?:\.\d+)?)?", re.I)


def _from_label_scores(text: str, labels: _Labels) -> RankingParse | None:
    scored: dict[str, float] = {}
    unknown: list[str] = []
    out_of = False
    for m in _LABEL_SCORE_RE.finditer(text):
        label, cleaned = labels.resolve(m.group(1))
        if label is None:
            if cleaned and cleaned not in unknown:
                unknown.append(cleaned)
            continue
        scored.pop(label, None)  # re-insert so the last score counts and the order stays stable
        scored[label] = float(m.group(2))
        out_of = out_of or m.end() > m.end(2)  # a denominator: scores, not places
    if len(scored) < 2:
        return None
    if not out_of and sorted(scored.values()) == [float(r) for r in range(1, len(scored) + 1)]:
        raise _Ambiguous  # 1 = best place or 1 = lowest score: "A: 1, B: 2, C: 3" reads both ways
    values = sorted(set(scored.values()), reverse=True)
    tiers = [[label for label in labels.labels if scored.get(label) == v] for v in values]
    return _finish(_Statement(tiers, [1.0] * (len(tiers) - 1), unknown, False), labels, "scores")


def _ranking_list(obj: Any) -> tuple[list[Any] | str | None, str]:
    """The ranking a JSON value holds, and its key (which may say the direction: ``worst_to_best``)."""
    if isinstance(obj, list):
        return obj, ""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, str) or not isinstance(value, list | str):
                continue
            if normalised_key(key) in _RANKING_KEYS or _WORST_FIRST_RE.search(key) or _BEST_FIRST_RE.search(key):
                return value, key
    return None, ""


def _from_json(text: str, labels: _Labels) -> RankingParse | None:
    for candidates in (json_candidates(text, "[", "]", need_quote=True),
                       json_candidates(text, "{", "}", need_quote=True)):
        for obj in candidates:
            items, key = _ranking_list(obj)
            if isinstance(items, str):
                intro = f"{key}: " if key else ""
                parsed = _from_chains(items, labels, intro) or _from_commas(items, labels, intro, text)
                if parsed is not None:
                    return RankingParse(parsed.order, parsed.strengths, "json", parsed.complete,
                                        parsed.cycles_broken, parsed.unknown)
                continue
            if not items:
                continue
            raw_tiers: list[list[str]] = []
            for item in items:
                if isinstance(item, list):
                    tier = [str(x) for x in item if isinstance(x, str | int) and not isinstance(x, bool)]
                elif isinstance(item, str | int) and not isinstance(item, bool):
                    tier = [str(item)]
                else:
                    tier = []
                if tier:
                    raw_tiers.append(tier)
            gaps = [1.0] * max(len(raw_tiers) - 1, 0)
            if not _statement(raw_tiers, gaps, labels).known:
                continue
            return _finish(_oriented(raw_tiers, gaps, _list_direction(key, text), labels), labels, "json")
    return None


def parse_ranking(text: str, labels: list[str]) -> RankingParse:
    """Read a ranking of ``labels`` from a judge's answer (see the module docstring for the order of
    attempts and the conventions). Never raises on the content of ``text``."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    known = _Labels(labels)
    try:
        parsed = _read_ranking(text, known)
    except _Ambiguous:
        parsed = None
    return parsed if parsed is not None else _finish(_Statement([], [], [], False), known, "none")


def _read_ranking(text: str, known: _Labels) -> RankingParse | None:
    """:func:`parse_ranking`'s passes in order; raises :class:`_Ambiguous` on an answer that reads two ways."""
    parsed = _from_json(text, known)
    if parsed is not None:
        return parsed
    for m in reversed(list(_BRACKETS_RE.finditer(text))):
        inner, intro = m.group(1), _introduction(text, m.start())
        parsed = _from_chains(inner, known, intro) or _from_commas(inner, known, intro, text)
        if parsed is None:
            label, _ = known.resolve(inner)
            if label is not None:
                if _WORST_RE.search(intro):
                    raise _Ambiguous  # "the worst is [[C]]": a verdict names the best one
                parsed = _finish(_Statement([[label]], [], [], False), known, "chain")
        if parsed is not None:
            return parsed
    return _from_chains(text, known) or _from_commas(text, known) or _from_label_scores(text, known)


def ranks_from_order(order: list[list[str]], labels: list[str]) -> list[float]:
    """Average rank of each label (1 = best; a tier of k labels shares the mean of its k positions), in
    ``labels`` order. Labels absent from ``order`` share a last tier, as in :func:`parse_ranking`;
    names in ``order`` that are not labels, and repeats, are ignored."""
    wanted = set(labels)
    seen: set[str] = set()
    tiers: list[list[str]] = []
    for tier in order:
        kept = []
        for label in tier:
            if label in wanted and label not in seen:
                seen.add(label)
                kept.append(label)
        if kept:
            tiers.append(kept)
    rest = [label for label in dict.fromkeys(labels) if label not in seen]
    if rest:
        tiers.append(rest)
    rank: dict[str, float] = {}
    position = 1
    for tier in tiers:
        shared = position + (len(tier) - 1) / 2
        for label in tier:
            rank[label] = shared
        position += len(tier)
    return [rank[label] for label in labels]

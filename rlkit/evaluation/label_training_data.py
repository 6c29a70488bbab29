"""People's labels and a ranking judge's orders as training data: the GRM's listwise records and preference pairs
(``rlkit data from-labels``).

Inputs, told apart per file by its first line:

* labelling files (:mod:`rlkit.evaluation.labelling`): completion lines with per-dimension levels, and group lines
  with rankings (tiers, ties allowed), from one labeller or several (``labellers``, ``rankings``);
* ``rlkit score`` output of a judge that ranks a record's completions (``judge=ranking``, ``judge=grm``; any judge's
  works): one line per completion with ``rank`` within its record (1 = best, ties share, null = unscored).

Several labellers become one answer (``combine``):

* a level: ``majority``, the level most of the dimension's labellers gave (a tie between levels is no majority: the
  label is dropped); ``mean``, the mean of their levels. Its *agreement* is the share of its labellers who gave the
  most common level (1 with one labeller);
* a ranking: ``majority``, each pair of completions ordered as most labellers order it (better, worse or tied; tied
  when no verdict is the most common), the completions ranked by wins minus losses over those pairs (Copeland's
  rule); ``mean``, ranked by their mean place
  (Borda). Its agreement is, over the group's completion pairs, the mean share of labellers who order the pair as
  the consensus does (tied counting as an order).

An answer whose agreement is below ``min_agreement`` is a disagreement: ``drop`` (the default) leaves it out;
``weight`` keeps it with its agreement as a ``weight`` on each response (a pair's is the lower of its two). Drop is
the default because neither ``rlkit train-grm`` nor TRL's ``DPOTrainer`` reads a weight: a kept disagreement would
train as hard as a unanimous answer; ``weight`` is for a trainer that reads it.

Completion lines become groups by prompt (and rubric): each completion's value is the mean of its consensus levels,
each scaled to [0, 1] by its dimension's range, over every dimension of its line (``rank_by=None``), or one
dimension's level; a completion without a consensus level on a dimension it is ranked by is left out. Equal values
tie. A judge file's groups are its runs of consecutive lines with one prompt (one record's completions, as ``rlkit
score`` writes them in order; two records in a row with one prompt read as one group: its lines carry no record
number).

A prompt is compared as :func:`rlkit.data.prompts.prompt_key` reads it (whitespace normalised, and one chat question
alike as ``user: q`` or as ``q``), for the groups, the duplicates and the split. Then: the same prompt and
completion (whitespace normalised) a second time is a duplicate, dropped (the first file given wins); a group left
with fewer than two completions, or all tied, teaches no order and is dropped; prompts are split into train and
held-out by a seeded hash of the prompt (``rlkit train-grm``'s rule: a prompt keeps its side as the data grows), so
no prompt is in both. Every drop is counted by reason in the report.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, Literal

from rlkit.core.errors import DataError
from rlkit.data.pairs import ListwiseRecord, RankedResponse, listwise_to_pairs
from rlkit.data.prompts import heldout_share, prompt_key
from rlkit.data.records import _prompt_problem, checked_json_lines, json_lines
from rlkit.evaluation.labelling import is_group, read_labelling
from rlkit.text.similarity import normalize_whitespace

Combine = Literal["majority", "mean"]
Disagreement = Literal["drop", "weight"]
TERMINAL = "(terminal)"  # whose ranking a file's lone unnamed `ranking` is
TIE = 1e-9


@dataclass(frozen=True)
class LabelOptions:
    """How labels become data: ``combine`` several labellers, the ``min_agreement`` below which an answer is a
    disagreement, what a ``disagreement`` does, what completion lines are ranked by, the held-out split."""

    combine: Combine = "majority"
    min_agreement: float = 0.5
    disagreement: Disagreement = "drop"
    rank_by: str | None = None  # None: every dimension of the line, each scaled to [0, 1]
    heldout_fraction: float = 0.1
    seed: int = 0


@dataclass
class Group:
    """One prompt's completions in order (rank 1 = best, ties share), with each one's weight (agreement)."""

    prompt: Any
    reference: str | None
    domain: str | None
    texts: list[str]
    ranks: list[int]
    weights: list[float]


@dataclass
class Tally:
    """What was read and what was dropped, by reason, per unit."""

    read: Counter[str] = field(default_factory=Counter)
    labels: Counter[str] = field(default_factory=Counter)
    completions: Counter[str] = field(default_factory=Counter)
    groups: Counter[str] = field(default_factory=Counter)
    down_weighted: Counter[str] = field(default_factory=Counter)  # kept with their agreement as the weight


@dataclass
class LabelData:
    """The splits' listwise records and pairs, and the report."""

    train: list[dict[str, Any]]
    heldout: list[dict[str, Any]]
    train_pairs: list[dict[str, Any]]
    heldout_pairs: list[dict[str, Any]]
    report: dict[str, Any]


# --- reading -------------------------------------------------------------------------------------------------------

def _scored_problem(line: Any) -> str | None:
    if not isinstance(line, dict):
        return "expected a JSON object"
    if "prompt" not in line or not isinstance(line.get("completion"), str) or "rank" not in line:
        return 'needs "prompt", "completion" (text) and "rank", as `rlkit score ... score.output=FILE` writes them'
    problem = _prompt_problem(line["prompt"])
    if problem:
        return problem
    rank = line["rank"]
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 1):
        return f'"rank": a whole number >= 1 (1 = best) or null (unscored), got {json.dumps(rank)}'
    return None


def read_inputs(paths: Sequence[Path]) -> list[tuple[Path, str, list[dict[str, Any]]]]:
    """Each file as (path, kind, lines), kind ``labelling`` or ``scored``; a folder (a run's ``labelling/``) is its
    ``*.jsonl`` files by name. The first bad line anywhere is a ``DataError`` naming ``file:line``, before anything is
    written."""
    files: list[Path] = []
    for given in map(Path, paths):
        if given.is_dir():
            found = sorted(given.glob("*.jsonl"))
            if not found:
                raise DataError("a folder without .jsonl files", str(given))
            files += found
        elif not given.is_file():
            raise DataError("no such labelling or scored file", str(given))
        else:
            files.append(given)
    out = []
    for path in files:
        first = next(iter(json_lines(path)), None)
        if first is None:
            raise DataError("the file holds no lines", str(path))
        labelling = isinstance(first[1], dict) and "dimensions" in first[1]
        if labelling:
            lines = read_labelling(path)
            numbers = [number for number, _ in json_lines(path)]  # blank lines are skipped, and still counted
            for number, line in zip(numbers, lines, strict=True):  # the labelling tools never read it; data does
                problem = _prompt_problem(line.get("prompt"))
                if problem:
                    raise DataError(problem, f"{path}:{number}")
        else:
            lines = checked_json_lines(path, _scored_problem, "the file holds no lines")
        out.append((path, "labelling" if labelling else "scored", lines))
    return out


# --- several labellers, one answer ---------------------------------------------------------------------------------

def _level_answers(line: dict[str, Any], name: str) -> list[float]:
    """Every labeller's level of dimension ``name`` on a completion line (skips and nulls left out)."""
    given = [float(a[name]) for a in (line.get("labellers") or {}).values() if a.get(name) is not None]
    anonymous = (line.get("labels") or {}).get(name)
    if anonymous is not None and name not in (line.get("labelled_by") or {}):
        given.append(float(anonymous))  # the terminal's level (no labeller's name): one more answer
    return given


def combine_levels(levels: Sequence[float], combine: Combine) -> tuple[float | None, float]:
    """(the consensus level or None when there is no majority, its agreement: the most common level's share)."""
    counts = Counter(levels).most_common()
    agreement = counts[0][1] / len(levels)
    if combine == "mean":
        return sum(levels) / len(levels), agreement
    if len(counts) > 1 and counts[1][1] == counts[0][1]:
        return None, agreement
    return counts[0][0], agreement


def consensus_level(line: dict[str, Any], name: str, options: LabelOptions = LabelOptions()) -> float | None:
    """The labellers' one level of dimension ``name`` on a completion line, by the rule above (``options.combine``;
    below ``options.min_agreement``: None, as ``drop`` leaves it out); None when nobody labelled it."""
    given = _level_answers(line, name)
    if not given:
        return None
    level, agreement = combine_levels(given, options.combine)
    return level if level is not None and agreement >= options.min_agreement else None


def _places(tiers: list[list[int]], n: int) -> list[int]:
    """Competition ranks (1 = best, ties share the best) of ``n`` completions from tiers."""
    ranks = [0] * n
    place = 1
    for tier in tiers:
        for i in tier:
            ranks[i] = place
        place += len(tier)
    return ranks


def _sign(x: float) -> int:
    return 0 if abs(x) <= TIE else (1 if x > 0 else -1)


def competition_ranks(values: Sequence[float]) -> list[int]:
    """Rank 1 = the highest value; values within ``TIE`` share the best rank of their tie."""
    return [1 + sum(_sign(other - v) > 0 for other in values) for v in values]


def combine_rankings(orders: Sequence[list[int]], combine: Combine) -> tuple[list[int], float]:
    """(consensus competition ranks, agreement) of several labellers' ranks of the same completions."""
    n = len(orders[0])
    pairs = list(combinations(range(n), 2))
    if combine == "mean":
        score = [-sum(o[i] for o in orders) / len(orders) for i in range(n)]
    else:  # Copeland: pairwise majorities, wins minus losses
        score = [0.0] * n
        for i, j in pairs:
            verdicts = Counter(_sign(o[j] - o[i]) for o in orders).most_common()  # 1: i above j, 0: tied
            unique = len(verdicts) == 1 or verdicts[0][1] > verdicts[1][1]
            verdict = verdicts[0][0] if unique else 0  # no most common verdict: tied
            score[i] += verdict
            score[j] -= verdict
    ranks = competition_ranks(score)
    shares = [sum(_sign(o[j] - o[i]) == _sign(ranks[j] - ranks[i]) for o in orders) / len(orders) for i, j in pairs]
    return ranks, sum(shares) / len(shares)


# --- lines to groups -----------------------------------------------------------------------------------------------

def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _domain(line: dict[str, Any]) -> str | None:
    return line["domain"] if isinstance(line.get("domain"), str) else None


def _completion_value(line: dict[str, Any], options: LabelOptions, tally: Tally) -> tuple[float, float] | None:
    """(value, weight) of a completion line from its consensus levels; None (counted) when it has none to rank by."""
    dims = {d["name"]: d for d in line["dimensions"]}
    names = list(dims) if options.rank_by is None else [options.rank_by]
    if options.rank_by is not None and options.rank_by not in dims:
        tally.completions["no such dimension to rank by"] += 1
        return None
    scaled, weights, missing = [], [], None
    for name in names:
        given = _level_answers(line, name)
        if not given:
            tally.labels["not labelled"] += 1
            missing = missing or "incomplete labels: a dimension not labelled"
            continue
        level, agreement = combine_levels(given, options.combine)
        if level is None:
            tally.labels["no majority level (labellers split evenly)"] += 1
            missing = missing or "incomplete labels: labellers disagree"
            continue
        if agreement < options.min_agreement:
            if options.disagreement == "drop":
                tally.labels["labellers disagree (below min agreement)"] += 1
                missing = missing or "incomplete labels: labellers disagree"
                continue
            tally.down_weighted["levels"] += 1
        tally.labels["kept"] += 1
        low, high = dims[name]["range"]
        scaled.append((level - low) / (high - low) if high > low else 0.0)
        weights.append(agreement)
    if missing is not None:
        tally.completions[missing] += 1
        return None
    return sum(scaled) / len(scaled), min(weights)


def _ranked_group(line: dict[str, Any], options: LabelOptions, tally: Tally) -> Group | None:
    n = len(line["completions"])
    rankings = {k: v for k, v in (line.get("rankings") or {}).items() if v is not None}
    if not rankings and line.get("ranking") is not None:
        rankings = {line.get("ranked_by") or TERMINAL: line["ranking"]}
    if not rankings:
        tally.groups["not ranked"] += 1
        return None
    ranks, agreement = combine_rankings([_places(t, n) for t in rankings.values()], options.combine)
    weight = 1.0
    if agreement < options.min_agreement:
        if options.disagreement == "drop":
            tally.groups["labellers disagree (below min agreement)"] += 1
            return None
        tally.down_weighted["rankings"] += 1
        weight = agreement
    return Group(line["prompt"], _text(line.get("reference")), _domain(line), list(line["completions"]), ranks,
                 [weight] * n)


def labelling_groups(lines: list[dict[str, Any]], options: LabelOptions, tally: Tally,
                     by_prompt: dict[tuple[str, str], tuple[Group, list[float]]]) -> list[Group]:
    """A labelling file's ranked groups, and the groups its completion lines open: by prompt and rubric, across
    files (``by_prompt``: the groups so far, each with its completions' values; ranked once all are read)."""
    groups: list[Group] = []
    for line in lines:
        if is_group(line):
            tally.read["group lines"] += 1
            group = _ranked_group(line, options, tally)
            if group is not None:
                groups.append(group)
            continue
        tally.read["completion lines"] += 1
        judged = _completion_value(line, options, tally)
        if judged is None:
            continue
        key = (prompt_key(line["prompt"]), json.dumps(line.get("rubric"), sort_keys=True))
        if key not in by_prompt:
            by_prompt[key] = (Group(line["prompt"], _text(line.get("reference")), _domain(line), [], [], []), [])
            groups.append(by_prompt[key][0])
        group, values = by_prompt[key]
        group.texts.append(line["completion"])
        group.weights.append(judged[1])
        values.append(judged[0])
    return groups


def scored_groups(lines: list[dict[str, Any]], tally: Tally) -> list[Group]:
    """A scored file's groups: runs of consecutive lines with one prompt, ordered by their ``rank``."""
    groups: list[Group] = []
    last: tuple[str, str] | None = None
    for line in lines:
        tally.read["judge lines"] += 1
        key = (prompt_key(line["prompt"]), json.dumps(line.get("rubric"), sort_keys=True))
        if key != last:
            groups.append(Group(line["prompt"], _text(line.get("reference")), _domain(line), [], [], []))
            last = key
        if line.get("rank") is None:
            tally.completions["unscored by the judge"] += 1
            continue
        groups[-1].texts.append(line["completion"])
        groups[-1].ranks.append(int(line["rank"]))
        groups[-1].weights.append(1.0)
    return groups


def _deduplicated(groups: list[Group], tally: Tally) -> list[Group]:
    """Each (prompt, completion) once, the first kept; then the groups that still teach an order."""
    seen: set[tuple[str, str]] = set()
    kept = []
    for group in groups:
        keep = []
        for i, text in enumerate(group.texts):
            key = (prompt_key(group.prompt), normalize_whitespace(text))
            if key in seen:
                tally.completions["duplicate (same prompt and completion)"] += 1
                continue
            seen.add(key)
            keep.append(i)
        if len(keep) < 2:
            tally.groups["fewer than two completions left"] += 1
            continue
        ranks = [group.ranks[i] for i in keep]
        if len(set(ranks)) < 2:
            tally.groups["all tied"] += 1
            continue
        kept.append(Group(group.prompt, group.reference, group.domain, [group.texts[i] for i in keep],
                          competition_ranks([-float(r) for r in ranks]), [group.weights[i] for i in keep]))
    return kept


# --- the split and the outputs -------------------------------------------------------------------------------------

def heldout_prompts(groups: Sequence[Group], fraction: float, seed: int) -> set[str]:
    """The prompts held out: those whose seeded hash falls below ``fraction``; at least one when ``fraction`` > 0
    and there are two prompts or more (the lowest hash), so a small file still has a held-out side."""
    shares = {prompt_key(g.prompt): heldout_share(g.prompt, seed) for g in groups}
    chosen = {k for k, share in shares.items() if share < fraction}
    if fraction > 0 and not chosen and len(shares) >= 2:
        chosen = {min(shares, key=lambda k: shares[k])}
    return chosen


def _record(group: Group, weighted: bool) -> dict[str, Any]:
    responses = [{"text": t, "rank": r, **({"weight": round(w, 6)} if weighted else {})}
                 for t, r, w in zip(group.texts, group.ranks, group.weights, strict=True)]
    out: dict[str, Any] = {"prompt": group.prompt, "responses": responses}
    if group.reference is not None:
        out["reference"] = group.reference
    if group.domain is not None:
        out["domain"] = group.domain
    return out


def _pairs(groups: Sequence[Group], weighted: bool) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Every pair of different ranks, as ``rlkit data pairs`` writes them (TRL's preference format)."""
    records = [ListwiseRecord(g.prompt, tuple(RankedResponse(t, r) for t, r in zip(g.texts, g.ranks, strict=True)),
                              g.domain, None, g.reference) for g in groups]
    result = listwise_to_pairs(records, "all")
    weight = {(prompt_key(g.prompt), normalize_whitespace(t)): w for g in groups
              for t, w in zip(g.texts, g.weights, strict=True)}
    pairs = []
    for pair in result.pairs:
        row = pair.to_json()
        if weighted:
            key = prompt_key(pair.prompt)
            row["weight"] = round(min(weight[(key, normalize_whitespace(pair.chosen))],
                                      weight[(key, normalize_whitespace(pair.rejected))]), 6)
        pairs.append(row)
    return pairs, Counter({k: v for k, v in result.dropped.items() if v and k != "tie"})


def _split_counts(groups: Sequence[Group], pairs: int) -> dict[str, int]:
    return {"prompts": len({prompt_key(g.prompt) for g in groups}), "groups": len(groups),
            "completions": sum(len(g.texts) for g in groups), "pairs": pairs}


def training_data(inputs: Sequence[tuple[Path, str, list[dict[str, Any]]]], options: LabelOptions) -> LabelData:
    """The read files (:func:`read_inputs`) as the splits' listwise records and pairs, and the report."""
    tally = Tally()
    groups: list[Group] = []
    by_prompt: dict[tuple[str, str], tuple[Group, list[float]]] = {}
    for _, kind, lines in inputs:
        groups += labelling_groups(lines, options, tally, by_prompt) if kind == "labelling" else \
            scored_groups(lines, tally)
    for group, values in by_prompt.values():
        group.ranks = competition_ranks(values)
    groups = _deduplicated(groups, tally)
    held = heldout_prompts(groups, options.heldout_fraction, options.seed)
    train = [g for g in groups if prompt_key(g.prompt) not in held]
    heldout = [g for g in groups if prompt_key(g.prompt) in held]
    weighted = options.disagreement == "weight"
    train_pairs, train_dropped = _pairs(train, weighted)
    heldout_pairs, heldout_dropped = _pairs(heldout, weighted)
    report = {
        "command": "rlkit data from-labels",
        "inputs": [{"path": str(p), "kind": k, "lines": len(lines)} for p, k, lines in inputs],
        "options": {"combine": options.combine, "min_agreement": options.min_agreement,
                    "disagreement": options.disagreement, "rank_by": options.rank_by or "all dimensions",
                    "heldout_fraction": options.heldout_fraction, "seed": options.seed},
        "read": dict(tally.read),
        "labels": dict(tally.labels),
        "down_weighted": dict(tally.down_weighted),
        "dropped": {"completions": dict(tally.completions), "groups": dict(tally.groups),
                    "pairs": dict(train_dropped + heldout_dropped)},
        "train": _split_counts(train, len(train_pairs)),
        "heldout": _split_counts(heldout, len(heldout_pairs)),
    }
    return LabelData([_record(g, weighted) for g in train], [_record(g, weighted) for g in heldout],
                     train_pairs, heldout_pairs, report)


OUTPUT_FILES = {"train": "train.jsonl", "heldout": "heldout.jsonl", "train_pairs": "train.pairs.jsonl",
                "heldout_pairs": "heldout.pairs.jsonl", "report": "report.json"}


def _jsonl(rows: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_outputs(out: Path, data: LabelData) -> dict[str, Path]:
    """Every output into ``out`` at once: filled in a folder beside it, then renamed over it, so ``out`` holds a
    whole old set or a whole new one. A folder holding anything but a previous run's outputs is refused."""
    from rlkit.core.atomic import atomic_directory
    from rlkit.core.errors import ConfigError

    if out.exists() and any(out.iterdir()):
        report = out / OUTPUT_FILES["report"]
        try:
            ours = json.loads(report.read_text(encoding="utf-8")).get("command") == "rlkit data from-labels"
        except (OSError, ValueError, AttributeError):
            ours = False
        if not ours or any(p.name not in OUTPUT_FILES.values() for p in out.iterdir()):
            raise ConfigError("holds other files; give a new or empty folder (a previous from-labels output "
                              "folder is replaced whole)", f"--out {out}")
    texts = {"train": _jsonl(data.train), "heldout": _jsonl(data.heldout), "train_pairs": _jsonl(data.train_pairs),
             "heldout_pairs": _jsonl(data.heldout_pairs),
             "report": json.dumps(data.report, indent=2, ensure_ascii=False) + "\n"}
    with atomic_directory(out) as tmp:
        for key, text in texts.items():
            (tmp / OUTPUT_FILES[key]).write_text(text, encoding="utf-8")
    return {key: out / name for key, name in OUTPUT_FILES.items()}


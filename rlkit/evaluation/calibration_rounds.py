"""What a calibration round tells the rubric's author to fix, and how it compares with the round before.

The rubric design note iterates 2-3 rounds: score the labelled set, read the completions where judge and humans
disagree most, rewrite those anchors, score again. ``rlkit calibrate`` therefore lists the worst disagreements and
writes every labelled line's human and judge scores to ``calibration.json``; ``calibrate.previous`` points at the
``calibration.json`` (or its folder) of an earlier round of the same rubric, and the two are compared per dimension
and per line.

Disagreement of a line: the mean over the dimensions with both a label and a score of ``|judge - human|`` divided
by the dimension's span (``high - low``), so a binary miss and a 1-to-5 miss by four weigh alike (1.0). Whether a
line *agrees* (the lines a round fixed or broke) reads the judge's scores as κ does, each rounded to the nearest
level: a judge that scores by expectation (``scoring: expected``) never has a disagreement of exactly 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlkit.core.errors import DataError
from rlkit.core.markdown import md_cell, md_number
from rlkit.core.rubric import Rubric
from rlkit.evaluation.agreement_stats import to_levels

ROUND_NAME = "calibration.json"
ROUND_FORMAT = 1  # bump when the file's shape changes
STORE_FOLDER = "calibrations"  # in rlkit's cache, beside the audits: what rlkit fit's start-up reads


@dataclass(frozen=True)
class Disagreement:
    """One labelled line where judge and humans differ: its place in the labels, the texts and both sides' scores."""

    index: int  # the line's position among the labelled records
    record_id: str | None
    prompt: str
    completion: str
    human: dict[str, float]
    judge: dict[str, float]
    size: float  # mean |judge - human| / span over the dimensions with both
    reasons: dict[str, str] = field(default_factory=dict)  # the judge's, where it gave them (judge.params.reasons)

    @property
    def differing(self) -> list[str]:
        """The dimensions whose judge score, rounded to a level as κ rounds it (halves up), is not the human's."""
        return [name for name, h in self.human.items()
                if name in self.judge and math.floor(self.judge[name] + 0.5) != h]


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):  # chat: the last user turn is what was answered
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1]) if users else json.dumps(prompt, ensure_ascii=False)
    return str(prompt)


def line_scores(labelled: Sequence[dict[str, Any]], judge_scores: Any, rubric: Rubric,
                details: Sequence[dict[str, Any]] | None = None) -> list[Disagreement]:
    """Every labelled line with its human and judge scores and its disagreement, in the labels' order; ``details``
    (``ScoreResult.details``, one per line) brings the judge's reasons."""
    if hasattr(judge_scores, "detach"):
        judge_scores = judge_scores.detach().cpu().numpy()
    scores = np.asarray(judge_scores, dtype=float)
    out = []
    for index, record in enumerate(labelled):
        labels = record.get("labels") or {}
        human, judged, gaps = {}, {}, []
        for d, dim in enumerate(rubric.dimensions):
            value = float(scores[index, d])
            if not math.isnan(value):
                judged[dim.name] = value
            label = labels.get(dim.name)
            if label is None:
                continue
            human[dim.name] = float(label)
            if dim.name in judged:
                gaps.append(abs(value - float(label)) / max(dim.high - dim.low, 1e-9))
        out.append(Disagreement(index=index, record_id=record.get("id") if isinstance(record.get("id"), str) else None,
                                prompt=_prompt_text(record.get("prompt")), completion=str(record.get("completion")),
                                human=human, judge=judged, size=float(np.mean(gaps)) if gaps else 0.0,
                                reasons=dict((details[index] or {}).get("reasons") or {}) if details else {}))
    return out


def worst_disagreements(lines: Sequence[Disagreement], limit: int) -> list[Disagreement]:
    """The ``limit`` lines that disagree most (ties in the labels' order), leaving out lines that agree at the level κ
    reads (``differing`` is empty): under ``scoring: expected`` no score is exactly a level, so every line has some
    gap, and a 0.9 against a human 1 is not a disagreement to revise a rubric for."""
    ranked = sorted((line for line in lines if line.differing), key=lambda line: (-line.size, line.index))
    return ranked[:limit]


def round_payload(report: Any, lines: Sequence[Disagreement], written: Any = None) -> dict[str, Any]:
    """The JSON of ``calibration.json``: the round's agreement per dimension and every line's scores (NaN as null);
    with ``written`` (``scoring: expected`` also read as the levels written) its agreement as ``written``."""
    def number(x: float) -> float | None:
        return None if math.isnan(x) else round(float(x), 6)

    return {"format": ROUND_FORMAT, "rubric": report.rubric, "judge": report.judge, "labels": report.labels_path,
            "threshold": report.threshold,
            "dimensions": {row.name: {"n": row.n, "kappa": number(row.kappa), "spearman": number(row.spearman),
                                      "bias": number(row.bias), "flagged": row.flagged} for row in report.rows},
            **({"written": {row.name: {"n": row.n, "kappa": number(row.kappa), "spearman": number(row.spearman),
                                       "bias": number(row.bias)} for row in written.rows}} if written else {}),
            "lines": [{"id": line.record_id, "prompt": line.prompt, "completion": line.completion,
                       "human": line.human, "judge": line.judge, "disagreement": round(line.size, 6),
                       **({"reasons": line.reasons} if line.reasons else {})}
                      for line in lines]}


def read_round(path: str | Path, rubric: Rubric) -> dict[str, Any]:
    """A previous round's ``calibration.json`` (``path`` may be the file or its folder), checked to be a round of
    ``rubric`` (same name; its version may differ: rounds are how a rubric is revised)."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / ROUND_NAME
    if not path.is_file():
        raise DataError(f"no previous calibration round here (rlkit calibrate writes {ROUND_NAME} into "
                        "calibrate.output)", str(path))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"not a calibration round: {exc}", str(path)) from None
    if not isinstance(data, dict) or data.get("format") != ROUND_FORMAT or not isinstance(data.get("dimensions"), dict):
        raise DataError(f"not a calibration round written by this rlkit (format {ROUND_FORMAT})", str(path))
    name = (data.get("rubric") or {}).get("name")
    if name != rubric.name:
        raise DataError(f"a round of rubric {name!r}, not of {rubric.name!r}: compare rounds of the same rubric",
                        str(path))
    data["path"] = str(path)
    return data


@dataclass(frozen=True)
class RoundChange:
    """One dimension's agreement in the previous round and in this one."""

    name: str
    kappa_before: float
    kappa_now: float
    spearman_before: float
    spearman_now: float

    @property
    def kappa_change(self) -> float:
        return self.kappa_now - self.kappa_before


def compare_rounds(previous: dict[str, Any], report: Any) -> list[RoundChange]:
    """Per dimension of this round: κ and ρ before and now (NaN where the previous round lacks the dimension)."""
    def value(x: Any) -> float:
        return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else math.nan

    out = []
    for row in report.rows:
        before = previous["dimensions"].get(row.name) or {}
        out.append(RoundChange(row.name, value(before.get("kappa")), row.kappa, value(before.get("spearman")),
                               row.spearman))
    return out


def agrees(human: dict[str, Any], scores: dict[str, Any], rubric: Rubric) -> bool:
    """Whether the judge's ``scores`` give the human level on every dimension of ``rubric`` with both, each rounded to a
    level as κ reads it (:func:`~rlkit.evaluation.agreement_stats.to_levels`: nearest level, halves up, clipped to
    the range), so a fractional score of ``scoring: expected`` agrees when it rounds to the label."""
    for dim in rubric.dimensions:
        h, j = human.get(dim.name), scores.get(dim.name)
        if h is None or j is None:
            continue
        if float(to_levels(float(j), dim.low, dim.high)) != float(h):
            return False
    return True


def line_changes(previous: dict[str, Any], lines: Sequence[Disagreement], rubric: Rubric) -> tuple[int, int, int]:
    """Of the lines both rounds scored (matched by prompt and completion): how many the judge now gets right that it
    got wrong, how many it now gets wrong that it got right, and how many were matched. Right is :func:`agrees`
    over this round's dimensions, for both rounds' scores alike."""
    before = {(line.get("prompt"), line.get("completion")): line for line in previous.get("lines") or []
              if isinstance(line, dict)}
    fixed = broken = matched = 0
    for line in lines:
        old = before.get((line.prompt, line.completion))
        if old is None:
            continue
        matched += 1
        was_right = agrees(old.get("human") or {}, old.get("judge") or {}, rubric)
        is_right = agrees(line.human, line.judge, rubric)
        fixed += is_right and not was_right
        broken += was_right and not is_right
    return fixed, broken, matched


def _short(text: str, width: int = 60) -> str:
    text = text.replace("\n", "⏎")
    return text if len(text) <= width else text[:width - 1] + "…"


def _level(x: float) -> str:
    return f"{x:g}" if float(x).is_integer() else f"{x:.2f}"


def pair_text(line: Disagreement) -> str:
    """``correctness 1→0, brevity 5→3``: human level → judge score, for the dimensions that differ, each followed
    by the judge's reason where it gave one (``correctness 1→0 ("12 is not 7")``)."""
    def reason(name: str) -> str:
        return f' ("{line.reasons[name]}")' if line.reasons.get(name) else ""

    return ", ".join(f"{name} {_level(line.human[name])}→{_level(line.judge[name])}{reason(name)}"
                     for name in line.differing)


def render_rounds_markdown(worst: Sequence[Disagreement], changes: Sequence[RoundChange] | None = None,
                           previous: dict[str, Any] | None = None,
                           moved: tuple[int, int, int] | None = None) -> str:
    """The sections of ``calibration.md`` on the worst disagreements and on the change since the previous round."""
    lines = ["", "## Where judge and humans disagree most", "",
             "Human level → judge score on the dimensions that differ; disagreement: the mean of |judge − human| "
             "over the dimension's span. Rewrite the anchors these lines fall between, then calibrate again with "
             "`calibrate.previous` set to this folder.", ""]
    if worst:
        lines += ["| # | id | prompt | completion | human → judge | disagreement |", "|--:|---|---|---|---|--:|"]
        for rank, line in enumerate(worst, start=1):
            lines.append(f"| {rank} | {md_cell(line.record_id or str(line.index + 1))} | "
                         f"{md_cell(_short(line.prompt))} | "
                         f"{md_cell(_short(line.completion))} | {md_cell(pair_text(line))} | {line.size:.2f} |")
    else:
        lines.append("None: the judge gives the human level on every labelled dimension.")
    if changes is not None and previous is not None:
        rubric = previous.get("rubric") or {}
        lines += ["", "## Since the previous round", "",
                  f"Previous: `{previous.get('path')}` (judge `{previous.get('judge')}`, rubric v"
                  f"{rubric.get('version', '?')}).", "",
                  "| dimension | κ before | κ now | Δκ | ρ before | ρ now |", "|---|--:|--:|--:|--:|--:|"]
        for change in changes:
            lines.append(f"| {md_cell(change.name)} | {md_number(change.kappa_before)} | "
                         f"{md_number(change.kappa_now)} | "
                         f"{_signed(change.kappa_change)} | {md_number(change.spearman_before)} | "
                         f"{md_number(change.spearman_now)} |")
        if moved is not None:
            fixed, broken, matched = moved
            lines += ["", f"Of {matched} lines in both rounds: {fixed} now agree that did not, {broken} now disagree "
                          "that did not."]
    return "\n".join(lines) + "\n"


def _signed(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:+.3f}"


# --- the store rlkit fit reads at start-up ----------------------------------------------------------------------------


def store_round(payload: dict[str, Any], judge_config: dict[str, Any]) -> Path:
    """Keep ``payload`` (a round's ``calibration.json``) in rlkit's cache, keyed like the audits: the rubric version's
    folder, one file per (judge config, labelled lines). ``rlkit fit`` with the same rubric and judge config reads it
    at start-up (:func:`calibration_caveat`)."""
    from rlkit.core.atomic import atomic_write_text
    from rlkit.evaluation.audit_report import audited_key, store_folder

    judged = audited_key([{k: line[k] for k in ("prompt", "completion", "human")} for line in payload["lines"]],
                         judge_config)
    folder = store_folder(payload["rubric"], folder=STORE_FOLDER)
    path = folder / f"judge-{judged['judge_hash'][:12]}-labels-{judged['records_hash'][:12]}.json"
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({**payload, "judged": judged}, indent=1, ensure_ascii=False) + "\n")
    return path


def stored_round(rubric: Rubric, judge_config: dict[str, Any]) -> tuple[Path, dict[str, Any]] | None:
    """The stored calibration of this rubric version with ``judge_config`` over the most labelled lines (the latest of
    equals), or None."""
    from rlkit.evaluation.audit_report import audited_key, store_folder

    folder = store_folder(rubric.identity(), folder=STORE_FOLDER)
    judge_hash = audited_key([], judge_config)["judge_hash"]
    found = []
    for path in sorted(folder.glob(f"judge-{judge_hash[:12]}-labels-*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue  # a damaged store file vouches for nothing; the start-up check is advice, not a gate
        if data.get("format") == ROUND_FORMAT and (data.get("judged") or {}).get("judge_hash") == judge_hash:
            found.append((len(data.get("lines") or []), path.stat().st_mtime, path, data))
    if not found:
        return None
    _, _, path, data = max(found, key=lambda x: (x[0], x[1]))
    return path, data


def calibration_caveat(rubric: Rubric, judge_config: dict[str, Any]) -> str | None:
    """One line for a run's start when this judge's stored calibration on this rubric flags dimensions (κ or ρ below
    its threshold, or undefined): the rewards on those dimensions are not what the labellers would give."""
    found = stored_round(rubric, judge_config)
    if found is None:
        return None
    path, data = found
    flagged = [(name, row) for name, row in data["dimensions"].items() if row.get("flagged")]
    if not flagged:
        return None

    def kappa(row: dict[str, Any]) -> str:
        return "undefined" if row.get("kappa") is None else f"{row['kappa']:.2f}"

    shown = ", ".join(f"{name} (κ {kappa(row)})" for name, row in flagged)
    return (f"judge {data.get('judge')}: its calibration against {len(data.get('lines') or [])} human labels "
            f"({path}) is poor on {shown}: its rewards there are not what the labellers would give")

"""``rlkit calibrate judge=ranking``: how often a ranking judge orders a group's completions as the humans did.

The humans' orders are the group lines of a labelling file (``ranking``: tiers of completion indices, best first;
``rankings``: each labeller's). The judge scores each group (its ``rank`` dimension, higher is better). Per group:

* **pairwise agreement**: of the completion pairs the human put in different tiers, the share the judge orders the
  same way; a pair the judge scores equal counts one half. Pairs the human tied are left out (and counted);
* **Kendall τ-b** between the human's places and the judge's scores, ties on both sides allowed.

The report gives both over all ranked groups (agreement pooled over pairs, τ-b as the mean over groups), each with a
95% percentile bootstrap interval over groups (seeded; ``rlkit.evaluation.audit_checks``' resampling), and the same
per step window when the groups name one (``window``, else ``step``: ``calibration.window_of``), so a judge drifting
away from the humans as training goes on shows. Then the same numbers between every two labellers who ranked the same
groups (there a pair counts as agreed when both give the same relation, ties included). A group the judge left
unscored (NaN) is counted, never folded into the numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from rlkit.core.errors import DataError, no_such
from rlkit.core.markdown import md_number
from rlkit.core.stats import json_number, kendall_tau_b
from rlkit.data.records import json_lines
from rlkit.evaluation.audit_checks import Estimate, bootstrap, bootstrap_statistic, resample_indices
from rlkit.evaluation.labelling import is_group, tiers_problem

REPORT_NAME = "ranking.md"
JSON_NAME = "ranking.json"
RESAMPLES = 1000  # bootstrap resamples of the groups for each interval


def places(tiers: Sequence[Sequence[int]], n: int) -> list[float]:
    """Each completion's place (1 = best; tied completions share their tier's place)."""
    out = [math.nan] * n
    for place, tier in enumerate(tiers, start=1):
        for i in tier:
            out[i] = float(place)
    return out


def pair_agreement(human: Sequence[float], judge: Sequence[float]) -> tuple[float, int, int]:
    """(agreed, pairs the human ordered, pairs the human tied): ``human`` and ``judge`` are higher-is-better; a judge
    tie on an ordered pair counts one half."""
    agreed, ordered, tied = 0.0, 0, 0
    for i, j in combinations(range(len(human)), 2):
        if human[i] == human[j]:
            tied += 1
            continue
        ordered += 1
        if judge[i] == judge[j]:
            agreed += 0.5
        elif (human[i] > human[j]) == (judge[i] > judge[j]):
            agreed += 1
    return agreed, ordered, tied


@dataclass
class Alignment:
    """One comparison (the judge with the humans, or two labellers) over the groups both ordered."""

    first: str
    second: str
    groups: int = 0
    pairs: int = 0  # completion pairs the first side put in different tiers
    tied_pairs: int = 0
    agreed: float = 0.0
    taus: list[float] = field(default_factory=list)  # one per compared group (NaN where τ-b is undefined)
    unscored: int = 0  # groups the judge left without a score
    group_agreed: list[float] = field(default_factory=list)  # per compared group, as ``taus``: what is resampled
    group_pairs: list[int] = field(default_factory=list)
    agreement_interval: Estimate | None = None  # 95% bootstrap over groups (``with_intervals``)
    tau_interval: Estimate | None = None

    @property
    def agreement(self) -> float:
        return self.agreed / self.pairs if self.pairs else math.nan

    @property
    def tau(self) -> float:
        kept = [t for t in self.taus if not math.isnan(t)]
        return sum(kept) / len(kept) if kept else math.nan

    def add(self, agreed: float, pairs: int, tau: float) -> None:
        """One more compared group."""
        self.groups += 1
        self.pairs, self.agreed = self.pairs + pairs, self.agreed + agreed
        self.group_agreed.append(agreed)
        self.group_pairs.append(pairs)
        self.taus.append(tau)


def with_intervals(row: Alignment, resamples: int = RESAMPLES, seed: int = 0) -> Alignment:
    """``row`` with 95% percentile bootstrap intervals of its pooled agreement and mean τ-b, the groups resampled
    (one draw of ``resamples`` serves both)."""
    agreed, pairs = np.asarray(row.group_agreed, dtype=float), np.asarray(row.group_pairs, dtype=float)
    indices = resample_indices(row.groups, resamples, seed)

    def pooled(rows: np.ndarray) -> float:
        total = pairs[rows].sum()
        return float(agreed[rows].sum() / total) if total else math.nan

    row.agreement_interval = bootstrap_statistic(pooled, indices, row.groups)
    row.tau_interval = bootstrap(np.asarray(row.taus, dtype=float), indices)
    return row


def ranked_groups(path: Path) -> list[dict[str, Any]]:
    """Every group line with a ``ranking`` (set by the first labeller to rank it), from a file or a folder: a
    labelling file, or any JSONL of ``{"prompt", "completions", "ranking"}`` lines (other lines are passed over)."""
    from rlkit.evaluation.calibration import labels_files

    found = []
    for file in labels_files(path):
        if not file.is_file():
            raise DataError(no_such(file, "labels file"), str(file))
        for number, line in json_lines(file):
            if not (isinstance(line, dict) and is_group(line) and line.get("ranking") is not None):
                continue
            texts = line["completions"]
            problem = '"completions": a group needs a list of at least two texts' if not (
                isinstance(texts, list) and len(texts) >= 2 and all(isinstance(t, str) for t in texts)) else \
                tiers_problem(line["ranking"], len(texts))
            if problem:
                raise DataError(problem if problem.startswith('"') else f'"ranking": {problem}', f"{file}:{number}")
            found.append(line)
    if not found:
        raise DataError("no ranked group to hold a ranking judge to: rank groups first (`rlkit label serve <file>`); "
                        "for labels per dimension, calibrate needs a judge that does score them one by one (rule, "
                        "llm, hybrid, ensemble)", str(path))
    return found


def judge_alignment(groups: Sequence[dict[str, Any]], scores: Sequence[Sequence[float]], judge: str,
                    resamples: int = RESAMPLES, seed: int = 0) -> Alignment:
    """The judge's scores (one list per group, higher is better) against each group's ``ranking``, with bootstrap
    intervals over groups."""
    out = Alignment(judge, "humans")
    for line, judged in zip(groups, scores, strict=True):
        if any(math.isnan(s) for s in judged):
            out.unscored += 1
            continue
        human = [-p for p in places(line["ranking"], len(line["completions"]))]
        agreed, ordered, tied = pair_agreement(human, list(judged))
        out.tied_pairs += tied
        out.add(agreed, ordered, kendall_tau_b(human, list(judged)))
    return with_intervals(out, resamples, seed)


@dataclass
class WindowAlignment:
    """The judge's human alignment over the ranked groups of one step window (``window``: its first step)."""

    window: int
    judge: Alignment


def judge_alignment_by_window(groups: Sequence[dict[str, Any]], scores: Sequence[Sequence[float]], judge: str,
                              resamples: int = RESAMPLES, seed: int = 0) -> list[WindowAlignment]:
    """:func:`judge_alignment` within each step window, in step order; [] when no group names a step."""
    from rlkit.evaluation.calibration import window_of

    rows: dict[int, list[int]] = {}
    for i, line in enumerate(groups):
        window = window_of(line)
        if window is not None:
            rows.setdefault(window, []).append(i)
    return [WindowAlignment(window, judge_alignment([groups[i] for i in kept], [scores[i] for i in kept], judge,
                                                    resamples, seed))
            for window, kept in sorted(rows.items())]


def labeller_alignments(groups: Sequence[dict[str, Any]]) -> list[Alignment]:
    """Every two labellers over the groups both ranked: the share of pairs given the same relation (>, <, =)."""
    names = list(dict.fromkeys(name for line in groups for name in (line.get("rankings") or {})))
    rows = []
    for first, second in combinations(names, 2):
        row = Alignment(first, second)
        for line in groups:
            given = line.get("rankings") or {}
            if given.get(first) is None or given.get(second) is None:
                continue
            n = len(line["completions"])
            a, b = [-p for p in places(given[first], n)], [-p for p in places(given[second], n)]
            same = sum((a[i] > a[j]) - (a[i] < a[j]) == (b[i] > b[j]) - (b[i] < b[j])
                       for i, j in combinations(range(n), 2))
            row.add(float(same), n * (n - 1) // 2, kendall_tau_b(a, b))
        if row.groups:
            rows.append(row)
    return rows



def interval_text(estimate: Estimate | None) -> str:
    """``[low, high]`` of a bootstrap interval, ``—`` where there is none (no group, or every resample undefined)."""
    if estimate is None or math.isnan(estimate.low):
        return "—"
    return f"[{estimate.low:.3f}, {estimate.high:.3f}]"


def _windows_markdown(windows: Sequence[WindowAlignment]) -> list[str]:
    lines = ["", "## Human alignment by step window", "",
             "Each window holds the groups ranked from those training steps (the first step of each; `window`, else "
             "`step`). Agreement falling from window to window while the judge is unchanged is the sign of a policy "
             "that pleases the judge, not the humans.", "",
             "| window (first step) | groups | pairs | pairwise agreement | 95% interval | Kendall τ-b | "
             "95% interval |",
             "|--:|--:|--:|--:|--:|--:|--:|"]
    lines += [f"| {w.window} | {w.judge.groups} | {w.judge.pairs} | {md_number(w.judge.agreement)} | "
              f"{interval_text(w.judge.agreement_interval)} | {md_number(w.judge.tau)} | "
              f"{interval_text(w.judge.tau_interval)} |" for w in windows]
    return lines


def render_ranking_markdown(judge: Alignment, labellers: Sequence[Alignment], source: str,
                            windows: Sequence[WindowAlignment] = ()) -> str:
    """``ranking.md``: the judge's human alignment (overall, then by step window), then the labellers' with each
    other."""
    lines = [f"# Ranking judge calibration: `{judge.first}` against human rankings", "",
             f"From `{source}`: {judge.groups} ranked groups scored, {judge.unscored} left unscored by the judge.", "",
             "Pairwise agreement: of the completion pairs the human put in different tiers, the share the judge "
             "orders the same way (a judge tie counts ½; pairs the human tied are left out). Kendall τ-b: between "
             "the human's places and the judge's scores, the mean over groups. Intervals: 95% percentile bootstrap "
             "over groups.", "",
             "| compared | groups | pairs | tied pairs | pairwise agreement | Kendall τ-b | agreement 95% | "
             "τ-b 95% |",
             "|---|--:|--:|--:|--:|--:|--:|--:|",
             f"| judge {judge.first} – humans | {judge.groups} | {judge.pairs} | {judge.tied_pairs} | "
             f"{md_number(judge.agreement)} | {md_number(judge.tau)} | {interval_text(judge.agreement_interval)} | "
             f"{interval_text(judge.tau_interval)} |"]
    if windows:
        lines += _windows_markdown(windows)
    if labellers:
        lines += ["", "## Between labellers", "",
                  "The share of completion pairs two labellers gave the same relation (better, worse or tied), and "
                  "Kendall τ-b between their places: the ceiling to expect of the judge.", "",
                  "| labellers | groups | pairs | same relation | Kendall τ-b |", "|---|--:|--:|--:|--:|"]
        lines += [f"| {row.first} – {row.second} | {row.groups} | {row.pairs} | {md_number(row.agreement)} | "
                  f"{md_number(row.tau)} |" for row in labellers]
    return "\n".join(lines) + "\n"


def ranking_payload(judge: Alignment, labellers: Sequence[Alignment], windows: Sequence[WindowAlignment],
                    source: str) -> dict[str, Any]:
    """The numbers of ``ranking.md`` as JSON (``ranking.json``; NaN as null)."""
    def row(a: Alignment) -> dict[str, Any]:
        out: dict[str, Any] = {"first": a.first, "second": a.second, "groups": a.groups, "pairs": a.pairs,
                               "tied_pairs": a.tied_pairs, "agreement": json_number(a.agreement),
                               "tau": json_number(a.tau)}
        if a.agreement_interval is not None and a.tau_interval is not None:
            out.update(agreement_interval=a.agreement_interval.as_dict(), tau_interval=a.tau_interval.as_dict())
        return out

    return {"labels": source, "judge": {**row(judge), "unscored": judge.unscored},
            "windows": [{"window": w.window, **{k: v for k, v in row(w.judge).items() if k not in ("first", "second")},
                         "unscored": w.judge.unscored} for w in windows],
            "labellers": [row(a) for a in labellers]}

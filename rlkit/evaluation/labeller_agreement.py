"""Agreement between the people who labelled one file (``labellers`` of ``rlkit.evaluation.labelling``), per rubric
dimension, beside the judge's.

For every pair of labellers and every dimension: Cohen's κ with quadratic weights
(:func:`rlkit.evaluation.calibration.quadratic_weighted_kappa`, the judge's κ) over the lines both gave a level, and
each one's κ with the judge over the same lines. Judge–human agreement near the humans' own agreement is as good as
the labels allow; far below it, the judge is the problem, not the labels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from rlkit.core.markdown import md_number
from rlkit.core.rubric import Rubric
from rlkit.evaluation.agreement_stats import quadratic_weighted_kappa


@dataclass(frozen=True)
class PairAgreement:
    """Two labellers on one dimension, over the ``n`` lines both labelled."""

    dimension: str
    first: str
    second: str
    n: int
    kappa: float  # between the two
    judge_first: float  # the judge with ``first`` over the same lines (NaN without judge scores)
    judge_second: float


def labeller_names(records: Sequence[dict[str, Any]]) -> list[str]:
    """Every labeller named in the records, in the order they first appear."""
    names: dict[str, None] = {}
    for record in records:
        names.update(dict.fromkeys(record.get("labellers") or {}))
    return list(names)


def labeller_agreement(records: Sequence[dict[str, Any]], rubric: Rubric,
                       judge_scores: Any = None) -> list[PairAgreement]:
    """One row per dimension and pair of labellers with at least one line in common; [] with fewer than two.

    ``judge_scores``: ``[N, D]`` raw scores of the same records (rubric dimension order), or None."""
    import numpy as np

    names = labeller_names(records)
    scores = None if judge_scores is None else np.asarray(
        judge_scores.detach().cpu().numpy() if hasattr(judge_scores, "detach") else judge_scores, dtype=float)
    rows = []
    for d, dim in enumerate(rubric.dimensions):
        for first, second in combinations(names, 2):
            both = [(i, given[first][dim.name], given[second][dim.name]) for i, record in enumerate(records)
                    if (given := record.get("labellers") or {}).get(first, {}).get(dim.name) is not None
                    and given.get(second, {}).get(dim.name) is not None]
            if not both:
                continue
            index = [i for i, _, _ in both]
            a, b = [float(x) for _, x, _ in both], [float(y) for _, _, y in both]
            judged = scores[index, d] if scores is not None else None
            rows.append(PairAgreement(
                dim.name, first, second, len(both), quadratic_weighted_kappa(a, b, dim.low, dim.high),
                math.nan if judged is None else quadratic_weighted_kappa(a, judged, dim.low, dim.high),
                math.nan if judged is None else quadratic_weighted_kappa(b, judged, dim.low, dim.high)))
    return rows



def render_agreement_markdown(rows: Sequence[PairAgreement]) -> str:
    """The ``calibration.md`` section: one row per dimension and pair of labellers."""
    lines = ["", "## Agreement between labellers", "",
             "κ between two labellers over the lines both labelled (quadratic weights, as the judge's), and the "
             "judge's κ with each of them over the same lines. The humans' own κ is the ceiling to expect of the "
             "judge.", "",
             "| dimension | labellers | n | κ between them | κ judge–first | κ judge–second |",
             "|---|---|--:|--:|--:|--:|"]
    for row in rows:
        lines.append(f"| {row.dimension} | {row.first} – {row.second} | {row.n} | {md_number(row.kappa)} | "
                     f"{md_number(row.judge_first)} | {md_number(row.judge_second)} |")
    return "\n".join(lines) + "\n"

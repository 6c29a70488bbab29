"""Dimensions that move together: the rubric design note's MECE check, on the scores of ``rlkit score``.

Two dimensions whose scores rank the same completions the same way (|Spearman ρ| at or above ``threshold`` over the
completions both scored) measure one thing twice: the aggregator then counts it twice, and a policy that improves it
gains double. A strong negative ρ is as redundant (one is the other reversed). Constant dimensions have no ρ and are
never reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlkit.evaluation.agreement_stats import spearman

REDUNDANT_RHO = 0.9
MIN_PAIRS = 8  # below this a ρ of 1 is too easy to get by chance to call two dimensions one


@dataclass(frozen=True)
class RedundantPair:
    first: str
    second: str
    rho: float
    n: int


def redundant_pairs(raw_scores: Any, names: list[str], threshold: float = REDUNDANT_RHO,
                    min_pairs: int = MIN_PAIRS) -> list[RedundantPair]:
    """Every pair of dimensions with |ρ| >= ``threshold`` over at least ``min_pairs`` completions, strongest first."""
    scores = np.asarray(raw_scores.detach().cpu().numpy() if hasattr(raw_scores, "detach") else raw_scores,
                        dtype=float).reshape(-1, len(names))
    found = []
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            both = ~(np.isnan(scores[:, a]) | np.isnan(scores[:, b]))
            n = int(both.sum())
            if n < min_pairs:
                continue
            rho = spearman(scores[both, a], scores[both, b])
            if not math.isnan(rho) and abs(rho) >= threshold:
                found.append(RedundantPair(names[a], names[b], rho, n))
    return sorted(found, key=lambda p: -abs(p.rho))

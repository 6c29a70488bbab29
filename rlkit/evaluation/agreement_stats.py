"""Agreement between two raters of one rubric dimension (a judge and people, or two people): Cohen's quadratic-weighted
κ, Spearman's ρ, the mean bias and the confusion matrix, as ``rlkit calibrate`` reports them.

Metric conventions (each checked against scikit-learn / scipy in ``tests/evaluation/test_calibration.py``):

* Inputs are paired sequences; a pair where either side is NaN (or ``None``) is dropped first.
* Categories are the integers ``low..high`` of a dimension's range (binary: 0, 1; a 1–5 scale: 1..5).
  Human labels must already be whole levels inside the range. Judge scores, which a scale dimension
  may give as any real number, are rounded to the nearest level, halves up (2.5 → 3), and clipped to
  ``[low, high]``. Rounding applies to κ and the confusion matrix only.
* ``quadratic_weighted_kappa``: Cohen's κ with weights ``(i − j)² / (k − 1)²``. NaN with no pairs, and
  when it is 0/0: both sides give one and the same level throughout (no disagreement is possible).
* ``spearman``: the Pearson correlation of ranks, ties sharing their average rank, on the raw
  (unrounded) judge scores. NaN with fewer than two pairs or when either side is constant.
* ``mean_bias``: mean of ``judge − human`` on the raw judge scores (positive: the judge is lenient).
* ``confusion_matrix``: ``[k, k]`` counts, rows the human level, columns the rounded judge level.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


def _as_floats(x: Any) -> np.ndarray:
    """A flat float array from a list (``None`` → NaN), a numpy array or a torch tensor."""
    import numpy as np
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if arr.dtype == object:
        arr = np.array([np.nan if v is None else v for v in arr.ravel()], dtype=float)
    return arr.astype(float).ravel()


def paired(human: Any, judge: Any) -> tuple[np.ndarray, np.ndarray]:
    """Both sides as float arrays, keeping only the pairs where neither is NaN/None."""
    import numpy as np
    h, j = _as_floats(human), _as_floats(judge)
    if h.shape != j.shape:
        raise ValueError(f"human and judge differ in length: {h.size} vs {j.size}")
    keep = ~(np.isnan(h) | np.isnan(j))
    return h[keep], j[keep]


def level_bounds(low: float, high: float) -> tuple[int, int]:
    if float(low) != int(low) or float(high) != int(high) or low >= high:
        raise ValueError(f"categories need whole-number bounds low < high, got [{low}, {high}]")
    return int(low), int(high)


def to_levels(scores: Any, low: float, high: float) -> np.ndarray:
    """Round scores to the nearest whole level (halves up) and clip to ``[low, high]``; NaN stays NaN."""
    import numpy as np
    lo, hi = level_bounds(low, high)
    x = np.asarray(scores, dtype=float)
    return np.clip(np.floor(x + 0.5), lo, hi)


def _human_levels(h: np.ndarray, lo: int, hi: int) -> np.ndarray:
    import numpy as np
    if np.any(h != np.round(h)) or np.any((h < lo) | (h > hi)):
        bad = h[(h != np.round(h)) | (h < lo) | (h > hi)][0]
        raise ValueError(f"human label {bad:g} is not a whole level in [{lo}, {hi}]")
    return h.astype(np.int64)


def confusion_matrix(human: Any, judge: Any, low: float, high: float) -> np.ndarray:
    """Counts ``[k, k]`` of (human level, rounded judge level) over the complete pairs."""
    import numpy as np
    lo, hi = level_bounds(low, high)
    h, j = paired(human, judge)
    k = hi - lo + 1
    rows = _human_levels(h, lo, hi) - lo
    cols = to_levels(j, lo, hi).astype(np.int64) - lo
    counts = np.zeros((k, k), dtype=np.int64)
    np.add.at(counts, (rows, cols), 1)
    return counts


def quadratic_weighted_kappa(human: Any, judge: Any, low: float, high: float) -> float:
    """Cohen's κ with quadratic weights over the levels ``low..high`` (judge scores rounded to a level)."""
    import numpy as np
    observed = confusion_matrix(human, judge, low, high).astype(float)
    n = observed.sum()
    if n == 0:
        return math.nan
    k = observed.shape[0]
    idx = np.arange(k)
    weights = (idx[:, None] - idx[None, :]) ** 2 / (k - 1) ** 2
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / n
    disagreement_expected = float((weights * expected).sum())
    if disagreement_expected == 0:
        return math.nan
    return 1.0 - float((weights * observed).sum()) / disagreement_expected


def average_ranks(x: Any) -> np.ndarray:
    """Ranks 1..n; tied values share the mean of the ranks they span (as ``scipy.stats.rankdata``)."""
    import numpy as np
    x = np.asarray(x, dtype=float)
    n = x.size
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    starts = np.concatenate([[0], np.flatnonzero(sorted_x[1:] != sorted_x[:-1]) + 1])
    ends = np.concatenate([starts[1:], [n]])
    ranks = np.empty(n, dtype=float)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def spearman(human: Any, judge: Any) -> float:
    """Spearman's ρ with average ranks for ties; NaN with < 2 pairs or when either side is constant."""
    import numpy as np
    h, j = paired(human, judge)
    if h.size < 2:
        return math.nan
    rh, rj = average_ranks(h), average_ranks(j)
    rh, rj = rh - rh.mean(), rj - rj.mean()
    denom = math.sqrt(float((rh**2).sum()) * float((rj**2).sum()))
    if denom == 0:
        return math.nan
    return float(np.clip((rh * rj).sum() / denom, -1.0, 1.0))


def mean_bias(human: Any, judge: Any) -> float:
    """Mean of ``judge − human`` over the complete pairs (raw judge scores); NaN with no pairs."""
    h, j = paired(human, judge)
    return float((j - h).mean()) if h.size else math.nan

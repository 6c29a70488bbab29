"""The pure arithmetic of ``rlkit rubric audit``: the degradation ladder's rungs, per-record outcomes of each check,
percentile bootstrap intervals over records, and the trust score (its formula is in docs/rubric-audit.md).

Every check reduces to one number per audited record (NaN where the check does not apply to it), so each share and
the trust score itself get an interval from the same resampling of records.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# A rung rises when it scores more than this above the rung before: rewards are floats, equal scores must tie.
TOLERANCE = 1e-6

# The weights of the trust score's components; a component that did not run leaves the others renormalised.
TRUST_WEIGHTS: dict[str, float] = {"probes": 0.3, "ladder": 0.25, "stability": 0.15, "order": 0.1,
                                   "alignment": 0.15, "redundancy": 0.05}

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


# --- the degradation ladder ---------------------------------------------------------------------------------------


def _wrong_numbers(text: str) -> str:
    return NUMBER.sub(lambda m: str(int(float(m.group()) + 1)) if "." not in m.group() else f"{float(m.group()) + 1:g}",
                      text)


def _shuffled(text: str, seed: int) -> str:
    words = text.split()
    random.Random(seed).shuffle(words)
    return " ".join(words)


def _truncated(text: str) -> str:
    return text[: len(text) // 2]


LADDER: tuple[str, ...] = ("original", "wrong_numbers", "shuffled", "truncated", "empty")


def ladder_rungs(completion: str, seed: int) -> list[str]:
    """The completion degraded step by step, each rung from the one before (``LADDER`` names them): every number
    off by one, then the words shuffled, then cut to half, then nothing. Cumulative, so each rung is at least as
    broken as the last and a sound reward never rises from one to the next."""
    rungs = [completion, _wrong_numbers(completion)]
    rungs.append(_shuffled(rungs[-1], seed))
    rungs.append(_truncated(rungs[-1]))
    rungs.append("")
    return rungs


def ladder_outcome(rewards: Sequence[float]) -> float:
    """1.0 when no rung of a record's ladder scores above the original and the empty answer scores below it; 0.0 when
    a degraded answer beats the original (a policy gains by breaking its answer); NaN when the original scores no
    higher than the empty answer (already at the floor: nothing to descend) or a rung was not scored.

    Rungs are not compared with each other: a shorter wrong answer may fairly outscore a longer wrong one; what a
    policy could exploit is a broken answer outscoring a sound one."""
    values = [float(r) for r in rewards]
    if any(math.isnan(v) for v in values) or values[0] <= values[-1] + TOLERANCE:
        return math.nan
    return float(all(v <= values[0] + TOLERANCE for v in values[1:]))


def at_floor(rewards: Sequence[float]) -> bool:
    """Whether the empty answer scores at least as high as the original (the card counts these records)."""
    return bool(empty_as_high(rewards[-1] - rewards[0]))


def empty_as_high(empty_margin: float | np.ndarray) -> np.ndarray:
    """From the empty answer's reward minus the original's: whether the empty answer scores at least as high as the
    original (False where either was not scored, NaN)."""
    return np.asarray(empty_margin) >= -TOLERANCE


# --- per-record outcomes of the other checks -----------------------------------------------------------------------


def gains(original: np.ndarray, gamed: np.ndarray) -> np.ndarray:
    """1.0 where the gamed completion scores strictly higher than its original, 0.0 where not, NaN where either is
    unscored or the probe did not apply (gamed NaN)."""
    out = (gamed > original + TOLERANCE).astype(float)
    out[np.isnan(original) | np.isnan(gamed)] = np.nan
    return out


def agreement(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Per row ``[N, D]``: the share of dimensions both scored that got the same score twice; NaN where none was."""
    both = ~(np.isnan(first) | np.isnan(second))
    same = (np.abs(first - second) <= TOLERANCE) & both
    counts = both.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, same.sum(axis=1) / np.maximum(counts, 1), np.nan)


# --- bootstrap ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """A statistic over the audited records with its percentile bootstrap interval (95% by default)."""

    value: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, float | int | None]:
        return {"value": _finite(self.value), "low": _finite(self.low), "high": _finite(self.high), "n": self.n}

    def __str__(self) -> str:
        if math.isnan(self.value):
            return "—"
        return f"{self.value:.2f} [{self.low:.2f}–{self.high:.2f}]"


def _finite(x: float) -> float | None:
    return None if math.isnan(x) else round(float(x), 4)


def resample_indices(n: int, resamples: int, seed: int) -> np.ndarray:
    """``[resamples, n]`` record indices drawn with replacement; one draw serves every interval of an audit."""
    return np.random.default_rng(seed).integers(0, max(n, 1), size=(resamples, n))


def bootstrap(per_record: np.ndarray, indices: np.ndarray, level: float = 0.95) -> Estimate:
    """The mean of ``per_record`` (NaN entries left out) and its percentile interval over ``indices``' resamples."""
    values = np.asarray(per_record, dtype=float)
    n = int((~np.isnan(values)).sum())
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    samples = _nanmean_rows(values[indices])
    return Estimate(float(np.nanmean(values)), *_percentiles(samples, level), n)


def bootstrap_statistic(statistic: Callable[[np.ndarray], float], indices: np.ndarray, n: int,
                        level: float = 0.95) -> Estimate:
    """``statistic(record indices)`` on every record and on each resample: for numbers built from several checks."""
    value = statistic(np.arange(n))
    samples = np.array([statistic(row) for row in indices], dtype=float)
    return Estimate(value, *_percentiles(samples, level), n)


def _nanmean_rows(x: np.ndarray) -> np.ndarray:
    counts = (~np.isnan(x)).sum(axis=1)
    sums = np.nansum(x, axis=1)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _percentiles(samples: np.ndarray, level: float) -> tuple[float, float]:
    samples = samples[~np.isnan(samples)]
    if samples.size == 0:
        return math.nan, math.nan
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)


# --- the trust score -------------------------------------------------------------------------------------------------


def trust_score(components: dict[str, float | None]) -> float:
    """The weighted mean of the components that ran (``TRUST_WEIGHTS``), capped by the probe component: one trick a
    policy can find is enough to spoil a run, so no other check can make up for it."""
    present = {k: v for k, v in components.items() if v is not None and not math.isnan(v)}
    if not present:
        return math.nan
    total = sum(TRUST_WEIGHTS[k] for k in present)
    mean = sum(TRUST_WEIGHTS[k] * v for k, v in present.items()) / total
    return min(mean, present["probes"]) if "probes" in present else mean

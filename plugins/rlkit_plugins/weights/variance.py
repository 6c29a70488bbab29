"""``variance``: down-weights dimensions whose scores stopped varying within groups.

A group-relative advantage only learns from differences between a prompt's completions. A
dimension on which every group agrees (all completions right, all formatted, all short) adds the
same amount to every completion of a group, so its weight buys nothing; the same budget spent on
dimensions that still separate completions sharpens their signal. Measuring spread *within*
groups, rather than across the batch, is what matters: a dimension can differ from prompt to
prompt and still be useless to the advantage.

The rule, once per training step ``t``, with base weights ``b`` (the rubric's) and current
weights ``w`` (``b`` at the start):

1. Signal. For each dimension ``d``, each group with at least two scored completions gives its
   NaN-aware unbiased variance ``v[g, d]``; the step records ``S_t[d] = sum_g v[g, d]`` and
   ``N_t[d]`` (the number of such groups). The windowed variance is the pooled mean over the last
   ``window`` steps, ``V[d] = sum_t S_t[d] / sum_t N_t[d]`` (undefined while ``sum_t N_t[d] = 0``).
2. Collapse. Once the window is full, ``d`` has collapsed when ``V[d] < collapse_threshold``. A
   dimension with no scored group in the window, a ``fixed`` one, or one whose base weight is 0
   never collapses (no evidence, by choice, or nothing to take).
3. Target. With ``C`` the collapsed and ``M`` the other adjustable dimensions with ``b > 0``:
   ``target[c] = min_factor * b[c]``, and the freed budget ``F = (1 - min_factor) * sum_C b`` goes
   to ``M`` in proportion to base weight, ``target[m] = b[m] + F * b[m] / sum_M b``. ``fixed``
   dimensions keep ``b``. So ``sum(target) = sum(b)``. When ``C`` or ``M`` is empty (nothing
   collapsed, or everything did, when no dimension has signal to favour), ``target = b``.
4. Bounded move. ``w <- w + alpha * (target - w)`` with the largest ``alpha`` in [0, 1] keeping
   every ``|delta w[d]| <= max_change * b[d]``, i.e.
   ``alpha = min(1, min_d max_change * b[d] / |target[d] - w[d]|)``. One shared ``alpha`` (not a
   clip per dimension) keeps ``sum(w) = sum(b)`` at every step, and every weight moves at most
   ``max_change`` of its own base weight per step, so weights glide rather than jump, including
   the way back to ``b`` when everything collapsed.

Repeated steps (validation, ``rlkit score``) are handled by :class:`rlkit.reward.weighting.StepRecordScheduler`:
a step counts once, with the last batch it saw, and the current batch's variance counts in the current
weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlkit.plugin import ConfigError, Rubric, StepRecordScheduler, hookimpl, nan_mean_std

if TYPE_CHECKING:
    import torch


def step_variance(scores: torch.Tensor) -> tuple[list[float], list[int]]:
    """Per dimension: the sum of within-group variances and the number of groups that have one.

    A group needs two scored completions for a variance; groups with fewer are left out rather
    than counted as 0, which would look like a collapse when the judge merely failed.
    """
    import torch
    _, std, count = nan_mean_std(scores.to(torch.float64), dim=1)  # [B, D]
    has_spread = count >= 2
    var = torch.where(has_spread, std ** 2, torch.zeros_like(std))
    return var.sum(dim=0).tolist(), has_spread.sum(dim=0).tolist()


def _last(items: list[Any], n: int) -> list[Any]:
    return items[max(len(items) - n, 0):] if n > 0 else []


class VarianceWeights(StepRecordScheduler):
    """Moves weight from dimensions without within-group variance to those with it; see the module
    docstring for the exact rule."""

    @dataclass
    class Params:
        window: int = 20
        collapse_threshold: float = 1e-3
        min_factor: float = 0.1
        max_change: float = 0.1  # per step, as a fraction of each dimension's base weight
        fixed: list[str] = field(default_factory=list)

    def __init__(self, params: Params) -> None:
        p = params
        if p.window < 1:
            raise ConfigError(f"window must be >= 1, got {p.window}", "weights.params.window")
        if not (math.isfinite(p.collapse_threshold) and p.collapse_threshold >= 0):
            raise ConfigError(f"collapse_threshold must be >= 0, got {p.collapse_threshold}",
                              "weights.params.collapse_threshold")
        if not 0 <= p.min_factor <= 1:
            raise ConfigError(f"min_factor must lie in [0, 1], got {p.min_factor}", "weights.params.min_factor")
        if not (math.isfinite(p.max_change) and p.max_change > 0):
            raise ConfigError(f"max_change must be > 0 (a fraction of the base weight per step), got {p.max_change}",
                              "weights.params.max_change")
        super().__init__()
        self.params = p

    @property
    def collapsed(self) -> list[str]:
        """Dimensions judged collapsed at the latest step (for logging)."""
        return list(self.latest["collapsed"]) if self.latest else []

    def advance(self, step: int, scores: torch.Tensor, rubric: Rubric,
                previous: dict[str, Any] | None) -> dict[str, Any]:
        p = self.params
        names = rubric.dimension_names
        base = [float(w) for w in rubric.initial_weights()]
        prev = previous
        sums, counts = step_variance(scores)
        keep = p.window - 1
        window_sums = (_last(prev["window_sums"], keep) if prev else []) + [sums]
        window_counts = (_last(prev["window_counts"], keep) if prev else []) + [counts]
        current = list(prev["weights"]) if prev else list(base)

        adjustable = [d for d, name in enumerate(names) if base[d] > 0 and name not in p.fixed]
        collapsed: list[int] = []
        if len(window_sums) == p.window:
            for d in adjustable:
                n = sum(c[d] for c in window_counts)
                if n > 0 and sum(s[d] for s in window_sums) / n < p.collapse_threshold:
                    collapsed.append(d)
        moving = [d for d in adjustable if d not in collapsed]
        target = list(base)
        if collapsed and moving:
            freed = (1.0 - p.min_factor) * sum(base[d] for d in collapsed)
            moving_total = sum(base[d] for d in moving)
            for d in collapsed:
                target[d] = p.min_factor * base[d]
            for d in moving:
                target[d] = base[d] + freed * base[d] / moving_total

        alpha = 1.0
        for d in range(len(names)):
            gap = abs(target[d] - current[d])
            if gap > 0:
                alpha = min(alpha, p.max_change * base[d] / gap)
        new = list(target) if alpha >= 1.0 else [w + alpha * (t - w) for w, t in zip(current, target, strict=True)]
        return {"window_sums": window_sums, "window_counts": window_counts,
                "weights": [max(w, 0.0) for w in new], "collapsed": [names[d] for d in collapsed]}


@hookimpl
def rlkit_register_weight_schedulers(register: Callable[..., None]) -> None:
    register("variance", VarianceWeights)

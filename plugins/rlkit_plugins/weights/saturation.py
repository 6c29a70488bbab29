"""``saturation``: removes a dimension from the reward while it is saturated in most groups.

A dimension saturated in a group (every completion scored the same, or with ``majority_share < 1``
all but a few) cannot rank that group's completions; when that holds for most groups it mostly
adds a per-group constant that group-relative advantages cancel, while still diluting the
dimensions that do separate completions. So, per training step:

* the saturated share of each dimension is the share of the batch's groups that
  :func:`rlkit.reward.diagnostics.saturated_groups` (the host's one saturation detector, with
  ``majority_share``) marks; a group with fewer than two scored completions counts as saturated;
* a dimension is *saturated* this step when that share exceeds ``max_saturated_share``; it is
  removed (weight 0) after ``patience`` consecutive saturated steps, and restored after
  ``patience`` consecutive steps that are not (``patience: 1``, the default, acts on the current
  batch at once). A batch with no group leaves the streaks as they are;
* the removed dimensions' base weight goes to the remaining ones in proportion to their base
  weights, ``w[d] = b[d] * sum_A b / sum_R b`` (``A`` the adjustable dimensions, ``R`` those of
  them not removed), so the total weight is unchanged. ``fixed`` dimensions are never removed and
  receive no share; their weight stays the base weight;
* if every adjustable dimension with a positive base weight would be removed, the base weights are
  returned (and :attr:`SaturationWeights.removed` is empty).

Repeated steps are handled by :class:`rlkit.reward.weighting.StepRecordScheduler`: the state as of the last
finished step is kept apart from the current step's record, which a repeated call replaces, so a step
counts once, with its last batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlkit.plugin import ConfigError, Rubric, StepRecordScheduler, hookimpl, saturation_share

if TYPE_CHECKING:
    import torch


class SaturationWeights(StepRecordScheduler):
    """Zero weight for dimensions saturated in more than ``max_saturated_share`` of the groups."""

    @dataclass
    class Params:
        majority_share: float = 1.0
        max_saturated_share: float = 0.8
        patience: int = 1
        fixed: list[str] = field(default_factory=list)

    def __init__(self, params: Params) -> None:
        p = params
        if not (0 < p.majority_share <= 1):
            raise ConfigError(f"majority_share must lie in (0, 1], got {p.majority_share}",
                              "weights.params.majority_share")
        if not (math.isfinite(p.max_saturated_share) and 0 <= p.max_saturated_share <= 1):
            raise ConfigError(f"max_saturated_share must lie in [0, 1], got {p.max_saturated_share}",
                              "weights.params.max_saturated_share")
        if p.patience < 1:
            raise ConfigError(f"patience must be >= 1 step, got {p.patience}", "weights.params.patience")
        super().__init__()
        self.params = p

    @property
    def removed(self) -> list[str]:
        """Dimensions out of the reward at the latest step (for logging)."""
        return list(self.latest["removed"]) if self.latest else []

    def advance(self, step: int, scores: torch.Tensor, rubric: Rubric,
                previous: dict[str, Any] | None) -> dict[str, Any]:
        p = self.params
        names = rubric.dimension_names
        base = [float(w) for w in rubric.initial_weights()]
        prev = previous
        flagged = list(prev["flagged"]) if prev else [False] * len(names)
        streak = list(prev["streak"]) if prev else [0] * len(names)
        share = saturation_share(scores, p.majority_share).tolist()  # NaN when the batch has no group
        for d, name in enumerate(names):
            if name in p.fixed or math.isnan(share[d]):
                continue
            if (share[d] > p.max_saturated_share) == flagged[d]:
                streak[d] = 0
                continue
            streak[d] += 1
            if streak[d] >= p.patience:
                flagged[d], streak[d] = not flagged[d], 0

        adjustable = [d for d, name in enumerate(names) if base[d] > 0 and name not in p.fixed]
        remaining = [d for d in adjustable if not flagged[d]]
        weights, removed = list(base), []
        if remaining and len(remaining) < len(adjustable):
            scale = sum(base[d] for d in adjustable) / sum(base[d] for d in remaining)
            for d in adjustable:
                weights[d] = base[d] * scale if not flagged[d] else 0.0
            removed = [names[d] for d in adjustable if flagged[d]]
        return {"flagged": flagged, "streak": streak, "weights": weights,
                "removed": removed}


@hookimpl
def rlkit_register_weight_schedulers(register: Callable[..., None]) -> None:
    register("saturation", SaturationWeights)

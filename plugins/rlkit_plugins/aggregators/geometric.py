"""``geometric``: Π sᵢ^{wᵢ} over the dimensions that were scored, weights renormalised, scores floored.

The rubric design note (§5.2) writes the weighted geometric mean as R = Π sᵢ^{wᵢ}. rlkit computes

    R = Π_{i scored, wᵢ > 0} max(sᵢ, floor)^{wᵢ / Σⱼ wⱼ}

with two departures, both deliberate:

* the exponents are renormalised to sum to 1 over the dimensions scored for this completion (``wᵢ / Σⱼ wⱼ``), so
  R stays in [floor, 1] like the scores and a completion with an unscored (NaN) dimension is not rewarded for the
  missing factor (with raw weights, Π sᵢ^{wᵢ} grows when a factor below 1 drops out, and its scale depends on
  Σ w). With weights that already sum to 1 and every dimension scored, it is the note's formula exactly.
* each score is floored at ``floor`` (0.01) first: in the note's product a single 0 makes R = 0 whatever the other
  dimensions say, so every completion with a zero anywhere ties and the group gives no gradient among them. The
  floor keeps the order of the rest (0.01^{wᵢ} is a heavy but finite penalty).

``hard_zero: true`` restores the note's zero where it is meant as a veto: a scored 0 on a dimension of positive
weight makes R exactly 0 (the note's example: a safety dimension at 0 zeroes the reward however good the rest),
while scores between 0 and ``floor`` are still floored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import ConfigError, RewardBatch, hookimpl

if TYPE_CHECKING:
    import torch


def nan_geometric_mean(scores: torch.Tensor, weights: torch.Tensor, *, floor: float = 0.01,
                       hard_zero: bool = False) -> torch.Tensor:
    """Weighted geometric mean over the last dim, skipping NaN entries and renormalising the weights left.

    ``scores [..., D]`` in [0, 1], ``weights [D]`` → ``[...]``. Each score is raised to ``floor``
    first: without it a single 0 would erase every other dimension's signal, and every completion
    with a 0 anywhere would tie. With ``hard_zero`` a scored 0 (on a dimension of positive weight)
    makes the result exactly 0 instead. Where nothing with positive weight was scored the result
    is NaN, as in ``nan_weighted_sum``.
    """
    import torch
    w = weights.to(scores.dtype).expand_as(scores)
    counted = ~torch.isnan(scores) & (w > 0)
    w = torch.where(counted, w, torch.zeros_like(w))
    total = w.sum(dim=-1)
    logs = torch.where(counted, scores.clamp(min=floor).log(), torch.zeros_like(scores))
    mean = torch.exp((logs * w).sum(dim=-1) / total.clamp(min=torch.finfo(scores.dtype).tiny))
    if hard_zero:
        mean = torch.where((counted & (scores <= 0)).any(dim=-1), torch.zeros_like(mean), mean)
    return torch.where(total > 0, mean, torch.full_like(total, float("nan")))


class GeometricAggregator:
    """The reward is the weighted geometric mean of the normalised scores: weak dimensions pull harder than in a sum.

    NaN (unscored) dimensions are skipped and the weights renormalised over the rest; a
    completion with nothing scored gets NaN.
    """

    @dataclass
    class Params:
        floor: float = 0.01
        """Scores below this count as this, so one zero does not make the product 0. In (0, 1)."""
        hard_zero: bool = False
        """A scored 0 on any dimension (of positive weight) makes the reward 0."""

    def __init__(self, params: Params) -> None:
        if not (math.isfinite(params.floor) and 0 < params.floor < 1):
            raise ConfigError(f"floor must lie in (0, 1), got {params.floor:g}", "aggregator.params.floor")
        self.params = params

    def aggregate(self, batch: RewardBatch) -> torch.Tensor:
        return nan_geometric_mean(batch.scores, batch.weights, floor=self.params.floor,
                                  hard_zero=self.params.hard_zero)


@hookimpl
def rlkit_register_aggregators(register):
    register("geometric", GeometricAggregator)

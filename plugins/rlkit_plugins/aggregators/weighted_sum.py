"""``weighted_sum``: Σ wᵢ·sᵢ over the dimensions that were scored, weights renormalised."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import RewardBatch, hookimpl, nan_weighted_sum

if TYPE_CHECKING:
    import torch

__all__ = ["WeightedSumAggregator", "nan_weighted_sum"]


class WeightedSumAggregator:
    """The reward is the weighted mean of the normalised dimension scores (so it stays in [0, 1])."""

    @dataclass
    class Params:
        pass

    def __init__(self, params: Params) -> None:
        self.params = params

    def aggregate(self, batch: RewardBatch) -> torch.Tensor:
        return nan_weighted_sum(batch.scores, batch.weights)


@hookimpl
def rlkit_register_aggregators(register):
    register("weighted_sum", WeightedSumAggregator)

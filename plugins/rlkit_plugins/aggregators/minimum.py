"""``min``: the weakest scored dimension is the reward."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import RewardBatch, hookimpl

if TYPE_CHECKING:
    import torch


def nan_min(scores: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Minimum over the last dim of the entries that were scored and have positive weight.

    ``scores [..., D]``, ``weights [D]`` → ``[...]``. The weights only switch dimensions on or off
    (a scheduler that sets a weight to 0 removes that dimension); their size does not matter.
    Where nothing with positive weight was scored the result is NaN, as in ``nan_weighted_sum``.
    """
    import torch
    counted = ~torch.isnan(scores) & (weights.to(scores.dtype) > 0)
    low = torch.where(counted, scores, torch.full_like(scores, float("inf"))).amin(dim=-1)
    return torch.where(counted.any(dim=-1), low, torch.full_like(low, float("nan")))


class MinAggregator:
    """The reward is the lowest normalised score among the scored dimensions of positive weight."""

    @dataclass
    class Params:
        pass

    def __init__(self, params: Params) -> None:
        self.params = params

    def aggregate(self, batch: RewardBatch) -> torch.Tensor:
        return nan_min(batch.scores, batch.weights)


@hookimpl
def rlkit_register_aggregators(register):
    register("min", MinAggregator)

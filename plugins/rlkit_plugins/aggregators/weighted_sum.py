"""``weighted_sum``: Σ wᵢ·sᵢ over the dimensions that were scored, weights renormalised."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlkit import RewardBatch, hookimpl


def nan_weighted_sum(scores: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted mean over the last dim, skipping NaN entries and renormalising the weights left.

    ``scores [..., D]``, ``weights [D]`` → ``[...]``. Where nothing with positive weight was
    scored the result is NaN: no reward, rather than a silent 0.
    """
    valid = ~torch.isnan(scores)
    w = torch.where(valid, weights.to(scores.dtype).expand_as(scores), torch.zeros_like(scores))
    total = w.sum(dim=-1)
    weighted = (torch.where(valid, scores, torch.zeros_like(scores)) * w).sum(dim=-1)
    return torch.where(total > 0, weighted / total.clamp(min=torch.finfo(scores.dtype).tiny),
                       torch.full_like(total, float("nan")))


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

"""``logsumexp``: a soft minimum of the weighted dimensions, ``R = -τ · log Σᵢ w̃ᵢ · exp(-sᵢ / τ)``.

The multi-reward design note (§1.2) names log-sum-exp beside the product as the way to let several rewards hold each
other back, where a linear sum lets one dimension buy off another. Over the dimensions scored for a completion, with
weights renormalised to ``w̃ᵢ = wᵢ / Σⱼ wⱼ``, the reward lies between the lowest score and the weighted mean
(Jensen's inequality): as ``temperature`` τ → 0 it is the minimum (``aggregator=min``), as τ → ∞ the weighted mean
(``weighted_sum`` with normalised weights); equal scores give that score. Unlike the minimum, every dimension still
moves the reward, the weakest most: ``∂R/∂sᵢ = w̃ᵢ·exp(-sᵢ/τ) / Σⱼ w̃ⱼ·exp(-sⱼ/τ)``, a softmax over the negated
scores. The note gives no temperature; 0.2 (rlkit's choice) puts R within about 0.14 of the minimum for two equally
weighted dimensions at 0 and 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import ConfigError, RewardBatch, hookimpl

if TYPE_CHECKING:
    import torch


def soft_minimum(scores: torch.Tensor, weights: torch.Tensor, temperature: float) -> torch.Tensor:
    """``-τ · log Σᵢ w̃ᵢ exp(-sᵢ/τ)`` over the last dim of ``scores [..., D]`` (normalised, in [0, 1]) with
    ``weights [D]``, skipping NaN scores and zero weights and renormalising the rest; NaN where nothing with positive
    weight was scored."""
    import torch
    w = weights.to(scores.dtype).expand_as(scores)
    counted = ~torch.isnan(scores) & (w > 0)
    w = torch.where(counted, w, torch.zeros_like(w))
    total = w.sum(dim=-1, keepdim=True)
    # log w̃ᵢ - sᵢ/τ, with -inf where a dimension does not count; logsumexp keeps exp(-sᵢ/τ) from underflowing
    log_terms = torch.where(counted, torch.log(w / total.clamp(min=torch.finfo(scores.dtype).tiny))
                            - torch.nan_to_num(scores) / temperature, torch.full_like(scores, -math.inf))
    soft = -temperature * torch.logsumexp(log_terms, dim=-1)
    return torch.where(total.squeeze(-1) > 0, soft, torch.full_like(soft, math.nan))


class LogSumExpAggregator:
    """The reward is a soft minimum of the weighted normalised scores: the weakest dimension pulls hardest, every
    dimension still counts. NaN (unscored) dimensions are skipped and the weights renormalised over the rest."""

    @dataclass
    class Params:
        temperature: float = 0.2
        """τ > 0: small is close to the minimum, large to the weighted mean."""

    def __init__(self, params: Params) -> None:
        if not (math.isfinite(params.temperature) and params.temperature > 0):
            raise ConfigError(f"temperature must be > 0, got {params.temperature:g}", "aggregator.params.temperature")
        self.params = params

    def aggregate(self, batch: RewardBatch) -> torch.Tensor:
        return soft_minimum(batch.scores, batch.weights, self.params.temperature).float()


@hookimpl
def rlkit_register_aggregators(register):
    register("logsumexp", LogSumExpAggregator)
